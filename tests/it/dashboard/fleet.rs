//! The Fleet page through real processes on RabbitMQ and Redis: two `cronq producer`s (the
//! leader with its `/metrics`), two `cronq consumer`s, one of them on a config where a job
//! is changed and one is added, and a `cronq dashboard`. What `/api/v1/fleet`, the page,
//! `/metrics` and the leader's log say about the odd consumer; the last hour's expected,
//! published and executed against the run history (`cronq runs --json`); the producers
//! reloading the odd config on SIGHUP, after which the other consumer is the odd one; that
//! consumer killed with `kill -9`, listed until its record lapses and gone after, and the
//! mismatch cleared with it (docs/dashboard.md, "Fleet").

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use chrono::{DateTime, Timelike as _, Utc};
use cronq_redis::RedisRegistry;
use cronq_shared::names::{Names, Namespace};
use cronq_shared::registry::{EXPIRY, REPORT_EVERY, Registry};
use nix::sys::signal::Signal;
use serde_json::Value;

use crate::support::dashboard::{self, WAIT, text};
use crate::support::history::scheduled;
use crate::support::producer_process::{LEADER, wait_leader};
use crate::support::{TestEnv, cli, free_addr, redis_url, scoped, until};

/// The consumer on the other config.
const ODD: &str = "consumer-odd";
/// The consumer on the leader's config.
const SAME: &str = "consumer-same";

/// How long the dashboard's state may be behind the store: it is read every 2 s
/// (`src/dashboard/snapshot.rs`), and a read takes a moment.
const STALE: Duration = Duration::from_secs(3);

/// `tick` every second (`allow`: a backlog run by both consumers at once skips none),
/// `changed` (with `command` as its command) and, when `extra`, the
/// job `extra`; the last two fire once a year, so only `tick` runs.
fn jobs(command: &str, extra: bool) -> String {
    let mut toml = format!(
        "[[job]]\nname = \"tick\"\nschedule = \"@every 1s\"\noverlap = \"allow\"\nmax_attempts = 1\ncommand = [\"true\"]\n\n\
         [[job]]\nname = \"changed\"\nschedule = \"0 0 1 1 *\"\ncommand = [\"{command}\"]\n"
    );
    if extra {
        toml.push_str(
            "\n[[job]]\nname = \"extra\"\nschedule = \"0 0 1 1 *\"\ncommand = [\"true\"]\n",
        );
    }
    toml
}

/// The value of the Prometheus series `series` (name and labels) in `text`.
fn gauge(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// `instance`'s count of differing jobs and its series for the jobs `changed` and `extra`.
fn named_jobs(text: &str, instance: &str) -> (Option<f64>, Option<f64>, Option<f64>) {
    let job = |job: &str| {
        gauge(
            text,
            &format!("cronq_config_digest_mismatch_job{{instance=\"{instance}\",job=\"{job}\"}}"),
        )
    };
    (
        gauge(
            text,
            &format!("cronq_config_digest_mismatch_jobs{{instance=\"{instance}\"}}"),
        ),
        job("changed"),
        job("extra"),
    )
}

/// The `instance` of each row of `rows` (a list of instances in `/api/v1/fleet`).
fn ids(rows: &Value) -> BTreeSet<String> {
    rows.as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["instance"].as_str().map(str::to_owned))
        .collect()
}

/// The part of the page's HTML from the element with id `id` to the end of its table.
fn table<'a>(html: &'a str, id: &str) -> &'a str {
    let from = html
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} on the page:\n{html}"));
    let rest = &html[from..];
    &rest[..rest.find("</table>").unwrap_or(rest.len())]
}

/// An instant of `/api/v1/fleet`.
fn instant(v: &Value) -> DateTime<Utc> {
    v.as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .unwrap_or_else(|| panic!("not an instant: {v}"))
        .with_timezone(&Utc)
}

/// The instances alive in the registry itself (not through the dashboard's snapshot).
async fn alive(registry: &RedisRegistry) -> BTreeSet<String> {
    registry
        .instances()
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.instance)
        .collect()
}

/// The ticks (unix seconds) of an `@every 1s` job in `from..=to`.
fn ticks(from: DateTime<Utc>, to: DateTime<Utc>) -> std::ops::RangeInclusive<i64> {
    let first = from.timestamp() + i64::from(from.timestamp_subsec_nanos() > 0);
    first..=to.timestamp()
}

/// The scheduled seconds of `tick`'s runs that succeeded, from `cronq runs --json`.
fn succeeded(env: &TestEnv, config: &str) -> BTreeSet<i64> {
    let v = cli::json(
        env,
        &[
            "runs", "--json", "--job", "tick", "--limit", "10000", "--config", config,
        ],
    );
    v["runs"]
        .as_array()
        .unwrap_or_else(|| panic!("no runs in {v}"))
        .iter()
        .filter(|r| r["outcome"] == "succeeded")
        .map(|r| scheduled(r["key"].as_str().expect("a key")))
        .collect()
}

#[tokio::test]
async fn fleet_names_the_odd_config_counts_the_hour_and_drops_a_killed_consumer() {
    scoped("dash-fleet", |env| async move {
        let config = cli::config(&env, &jobs("true", false));
        let odd = env.write_config("odd.toml", &format!("{LEADER}\n{}", jobs("false", true)));
        let odd = odd.to_string_lossy().into_owned();
        let admins = [free_addr(), free_addr()];
        let started = Utc::now().with_nanosecond(0).unwrap();
        let producers: Vec<u32> = admins
            .iter()
            .enumerate()
            .map(|(i, admin)| {
                let log = format!("producer-{}", i + 1);
                env.spawn(&log, &["producer", "--config", &config, "--admin-addr", admin])
            })
            .collect();
        let same_pid = cli::start_consumer(&env, &config, SAME);
        cli::start_consumer(&env, &odd, ODD);
        let d = dashboard::start(&env, "dashboard", &["dashboard", "--config", &config], "--addr", false).await;
        let (_, leader_pid) = wait_leader(&env, 0).await;
        let lead = producers.iter().position(|p| *p == leader_pid).expect("a producer leads");
        let (leader_log, standby_log) = (format!("producer-{}", lead + 1), format!("producer-{}", 2 - lead));
        let standby_pid = producers[1 - lead];
        let metrics = format!("http://{}/metrics", admins[lead]);
        let series = format!("cronq_config_digest_mismatch{{instance=\"{ODD}\"}}");

        // The API: the leader (since when it leads), the standby, both consumers alive; the
        // odd one named with the job it changes and the one it adds.
        let fleet = until(WAIT, "the fleet with the odd consumer named", || async {
            let v = d.json("/api/v1/fleet").await;
            let standbys: Vec<u64> = v["standbys"].as_array().into_iter().flatten().filter_map(|b| b["pid"].as_u64()).collect();
            let named = v["config"]["differ"].as_array().is_some_and(|d| d.iter().any(|d| d["count"].is_u64()));
            let ok = v["leader"]["instance"].as_str().is_some_and(|i| i.contains(&format!("-{leader_pid}-")))
                && v["leader"]["since"].is_string()
                && standbys == [u64::from(standby_pid)]
                && ids(&v["consumers"]) == BTreeSet::from([ODD.to_owned(), SAME.to_owned()])
                && named;
            if ok { Ok(v) } else { Err(v.to_string()) }
        })
        .await;
        let differ = &fleet["config"]["differ"];
        assert_eq!(differ.as_array().map(Vec::len), Some(1), "only {ODD} differs: {fleet}");
        assert_eq!(differ[0]["instance"], ODD, "{fleet}");
        assert_eq!(differ[0]["role"], "consumer", "{fleet}");
        assert_eq!(differ[0]["jobs"], serde_json::json!(["changed", "extra"]), "{fleet}");
        assert_eq!(differ[0]["count"], 2, "{fleet}");
        for c in fleet["consumers"].as_array().unwrap() {
            assert_eq!(c["config_differs"], c["instance"] == ODD, "{fleet}");
        }
        assert_eq!(fleet["standbys"][0]["config_differs"], false, "{fleet}");
        let standby = fleet["standbys"][0]["instance"].as_str().unwrap().to_owned();
        let since = instant(&fleet["leader"]["since"]);
        assert!(started <= since && since <= instant(&fleet["taken_at"]), "leading since {since}, test started {started}: {fleet}");

        // The page: the same instance and jobs; the standby and both consumers alive.
        let html = text(&d.url("/")).await;
        let differs = table(&html, "config-differ");
        for name in [ODD, "<code>changed</code>", "<code>extra</code>"] {
            assert!(differs.contains(name), "{name} not in the page's config table:\n{differs}");
        }
        assert!(!differs.contains(SAME), "{SAME} runs the leader's config:\n{differs}");
        assert!(html.contains(&format!("leading since <time datetime=\"{}\"", fleet["leader"]["since"].as_str().unwrap())), "{html}");
        let instances = table(&html, "instances");
        for row in [format!("<td><code>{standby}</code></td><td>standby</td>"), format!("<td><code>{SAME}</code></td><td>consumer</td>"), format!("<td><code>{ODD}</code></td><td>consumer</td>")] {
            assert!(instances.contains(&row), "no {row} in the page's instances:\n{instances}");
        }

        // The leader's log and /metrics say the same; the standby does not check.
        until(WAIT, "the leader's warning naming the instance and its jobs", || async {
            let log = env.log(&leader_log);
            let named = log.lines().any(|l| {
                l.contains("instances run another config than the leader")
                    && l.contains(&format!("{ODD} (consumer): jobs changed, extra (2 in all)"))
            });
            if named { Ok(()) } else { Err(log) }
        })
        .await;
        assert!(!env.log(&standby_log).contains("another config"), "a standby does not check:\n{}", env.log(&standby_log));
        let m = until(WAIT, "the leader's mismatch series", || async {
            let m = text(&metrics).await;
            if gauge(&m, &series) == Some(1.0) { Ok(m) } else { Err(m) }
        })
        .await;
        assert_eq!(gauge(&m, "cronq_config_digest_mismatch_instances"), Some(1.0), "{m}");
        assert_eq!(named_jobs(&m, ODD), (Some(2.0), Some(1.0), Some(1.0)), "the leader's /metrics names the jobs:\n{m}");
        let m = text(&d.url("/metrics")).await;
        assert_eq!((gauge(&m, &series), gauge(&m, "cronq_config_digest_mismatch_instances")), (Some(1.0), Some(1.0)), "the dashboard's /metrics:\n{m}");
        assert_eq!(named_jobs(&m, ODD), (Some(2.0), Some(1.0), Some(1.0)), "the dashboard's /metrics names the jobs:\n{m}");

        // The last hour: expected, published and executed against the run history.
        let v = until(WAIT, "10 ticks executed", || async {
            let v = d.json("/api/v1/fleet").await;
            if v["last_hour"]["executed"].as_u64() >= Some(10) { Ok(v) } else { Err(v.to_string()) }
        })
        .await;
        assert_eq!(v["leader"]["since"], fleet["leader"]["since"], "one term, one start: {v}");
        let hour = &v["last_hour"];
        let (from, at) = (instant(&hour["expected_from"]), instant(&hour["expected_at"]));
        let window = ticks(from, at);
        // `tick` is the only job that fires: its ticks from the oldest producer's start.
        assert_eq!(hour["expected"].as_u64(), Some(window.clone().count() as u64), "expected over {from}..={at}: {v}");
        // Every tick from the first published one to past the window's end ran once.
        let runs = until(WAIT, "every tick from the first to past the window to succeed", || async {
            let runs = succeeded(&env, &config);
            let first = *runs.first().ok_or_else(|| "no run yet".to_owned())?;
            let gaps: Vec<i64> = (first..=at.timestamp() + 1).filter(|t| !runs.contains(t)).collect();
            if gaps.is_empty() { Ok(runs) } else { Err(format!("ticks not (yet) run: {gaps:?}")) }
        })
        .await;
        let first = *runs.first().unwrap();
        let ran = runs.iter().filter(|t| window.contains(t)).count() as u64;
        let (expected, published, executed) = (hour["expected"].as_u64().unwrap(), hour["published"].as_u64().unwrap(), hour["executed"].as_u64().unwrap());
        let context = format!("expected {expected}, published {published}, executed {executed}, ran {ran} (first tick {first}) over {from}..={at}");
        // The slack, and only at the window's edges. At its start: the ticks after the
        // oldest producer started reporting but before the leader's first term began (a
        // first term publishes from its start on, docs/operations.md); two seconds cover
        // the lease and the first reads. At its end: a count reaches the store with its
        // process's next report (every REPORT_EVERY), so the ticks published or run in the
        // last report interval before the dashboard read, plus the one at its read, are in
        // the history and not yet counted; none counted is missing from the history.
        eprintln!("last hour: {context}");
        assert!(first >= *window.start() && ran <= expected && expected - ran <= 2, "expected against run: {context}");
        let in_flight = REPORT_EVERY.as_secs() + 2;
        assert!(published <= ran && ran - published <= in_flight, "published: {context}");
        assert!(executed <= ran && ran - executed <= in_flight, "executed: {context}");

        // Both producers reload the odd config (SIGHUP): now the other consumer differs,
        // as the leader's config check and every reporter follow the reload.
        std::fs::write(&config, std::fs::read_to_string(&odd).unwrap()).unwrap();
        for p in &producers {
            env.signal(*p, Signal::SIGHUP);
        }
        let same_series = format!("cronq_config_digest_mismatch{{instance=\"{SAME}\"}}");
        until(WAIT, "the other consumer named after the reload", || async {
            let v = d.json("/api/v1/fleet").await;
            let m = text(&metrics).await;
            let differ = &v["config"]["differ"];
            let named = differ.as_array().map(Vec::len) == Some(1)
                && differ[0]["instance"] == SAME
                && differ[0]["jobs"] == serde_json::json!(["changed", "extra"])
                && differ[0]["count"] == 2
                && v["standbys"][0]["config_differs"] == false
                && (gauge(&m, &same_series), gauge(&m, &series)) == (Some(1.0), Some(0.0))
                && named_jobs(&m, SAME) == (Some(2.0), Some(1.0), Some(1.0))
                && named_jobs(&m, ODD) == (Some(0.0), Some(0.0), Some(0.0))
                && gauge(&m, "cronq_config_digest_mismatch_instances") == Some(1.0)
                && env.log(&leader_log).contains(&format!("{SAME} (consumer): jobs changed, extra (2 in all)"));
            if named { Ok(()) } else { Err(format!("{v}\n{m}")) }
        })
        .await;

        // A consumer killed: listed while its last record lives (renewed at most
        // REPORT_EVERY before the kill, it lapses EXPIRY after that), gone once it lapsed.
        let conn = cronq_redis::connect(&redis_url()).await.unwrap();
        let registry = RedisRegistry::new(conn, &Names::new(&Namespace::new(&env.namespace).unwrap()));
        env.signal(same_pid, Signal::SIGKILL);
        let killed = Instant::now();
        let lives = EXPIRY - REPORT_EVERY - Duration::from_secs(2);
        while killed.elapsed() < lives {
            let v = d.json("/api/v1/fleet").await;
            assert!(ids(&v["consumers"]).contains(SAME), "{SAME} gone {:?} after the kill, before its record could lapse: {v}", killed.elapsed());
            assert!(alive(&registry).await.contains(SAME), "{SAME}'s record gone {:?} after the kill", killed.elapsed());
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let lapsed = EXPIRY + STALE + Duration::from_secs(2);
        let v = until(lapsed.saturating_sub(killed.elapsed()), "the killed consumer to be gone", || async {
            let v = d.json("/api/v1/fleet").await;
            let gone = !ids(&v["consumers"]).contains(SAME) && !alive(&registry).await.contains(SAME);
            if gone { Ok(v) } else { Err(v.to_string()) }
        })
        .await;
        eprintln!("{SAME} gone {:?} after the kill", killed.elapsed());
        assert_eq!(ids(&v["consumers"]), BTreeSet::from([ODD.to_owned()]), "the live consumer stays: {v}");
        // With it gone, the fleet runs the leader's config again.
        until(WAIT, "the mismatch cleared", || async {
            let m = text(&metrics).await;
            let v = d.json("/api/v1/fleet").await;
            let cleared = gauge(&m, &same_series) == Some(0.0)
                && named_jobs(&m, SAME) == (Some(0.0), Some(0.0), Some(0.0))
                && gauge(&m, "cronq_config_digest_mismatch_instances") == Some(0.0)
                && v["config"]["differ"] == serde_json::json!([])
                && env.log(&leader_log).contains("every instance runs the leader's config again");
            if cleared { Ok(()) } else { Err(format!("{m}\n{v}")) }
        })
        .await;
        let html = text(&d.url("/")).await;
        assert!(html.contains("id=\"config-same\"") && !html.contains(SAME), "{html}");
    })
    .await;
}
