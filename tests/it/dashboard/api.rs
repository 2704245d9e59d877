//! The JSON API of a real `cronq dashboard`: reads (jobs with search, sort and pages; a job
//! with its next fire times; runs by key; dead letters; the fleet), the changes with the
//! admin token (pause with a note seen by `cronq jobs`, resume, trigger, backfill preview,
//! dry-run replay), errors as JSON (unknown job with a "did you mean", bad parameters,
//! missing or wrong token); then the same through `--data` and a standalone's
//! `--dashboard-addr` on one data file; and the outage of a Redis of the test's own, and of
//! RabbitMQ behind a proxy of the test's own, shown on the API and the pages, then gone once
//! it is back.

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::jobs;
use crate::support::cli::{self, start_consumer};
use crate::support::dashboard::{self, TOKEN, WAIT, text};
use crate::support::data_file::DataFile;
use crate::support::deliveries::declare;
use crate::support::occurrences::queue;
use crate::support::producer_process::{LEADER, producer};
use crate::support::proxy::Proxy;
use crate::support::rabbitmq::{self, publish_raw};
use crate::support::{eventually, scoped};

/// Waits until `GET /api/v1/runs?key=KEY` shows a run with `outcome`.
async fn run_of(d: &dashboard::Dashboard, key: &str, outcome: &str) -> Value {
    let path = format!("/api/v1/runs?key={key}");
    eventually(WAIT, &format!("a {outcome} run of {key}"), || async {
        let v = d.json(&path).await;
        v["runs"]
            .as_array()
            .and_then(|r| r.iter().find(|r| r["outcome"] == outcome).cloned())
    })
    .await
}

/// How much later than its publish an occurrence may seem to start, at most: the producer's
/// and the consumer's clocks (one machine here).
const CLOCK_SLACK_MS: i64 = 1000;

/// Backfills one past occurrence of `report` through `d` (whose dashboard takes changes),
/// waits for its run on `reader` and checks the run's publish lateness on
/// `GET /api/v1/jobs/report`: present, from the scheduled instant to `published_at`,
/// non-negative and no larger than the start lateness (plus [`CLOCK_SLACK_MS`]).
async fn check_publish_lateness(d: &dashboard::Dashboard, reader: &dashboard::Dashboard) {
    let range = json!({ "from": "2026-01-01T00:00:00Z", "to": "2026-01-01T23:59:59Z" });
    let (status, v) = d
        .post("/api/v1/jobs/report/backfill", Some(TOKEN), range)
        .await;
    assert_eq!(
        (status, v["count"].as_u64()),
        (StatusCode::OK, Some(1)),
        "{v}"
    );
    let key = "report@2026-01-01T01:30:00Z";
    run_of(reader, key, "succeeded").await;
    let v = reader.json("/api/v1/jobs/report").await;
    let run = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == key)
        .unwrap_or_else(|| panic!("{v}"));
    let published_at: chrono::DateTime<chrono::Utc> = run["published_at"]
        .as_str()
        .unwrap_or_else(|| panic!("a publish time: {run}"))
        .parse()
        .unwrap();
    let scheduled: chrono::DateTime<chrono::Utc> = "2026-01-01T01:30:00Z".parse().unwrap();
    let publish = run["publish_lateness_ms"]
        .as_i64()
        .unwrap_or_else(|| panic!("a publish lateness: {run}"));
    let start = run["start_lateness_ms"]
        .as_i64()
        .unwrap_or_else(|| panic!("a start lateness: {run}"));
    // published_at is shown to the second, the lateness to the ms.
    let shown = (published_at - scheduled).num_milliseconds();
    assert!(
        (shown..shown + 1000).contains(&publish),
        "scheduled to published_at: {run}"
    );
    assert!(publish >= 0, "published after its scheduled instant: {run}");
    assert!(
        publish <= start + CLOCK_SLACK_MS,
        "published before it started: {run}"
    );
    // A manual trigger has no scheduled instant: no lateness, but its publish time.
    let manual = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"].as_str().is_some_and(|k| k.contains("@manual-")));
    if let Some(manual) = manual {
        assert!(
            manual["publish_lateness_ms"].is_null() && manual["published_at"].is_string(),
            "{manual}"
        );
    }
    // The job page shows it in the run's row and plots it.
    let page = text(&reader.url("/jobs/report")).await;
    let row = &page[page
        .find(&format!("data-key=\"{key}\""))
        .unwrap_or_else(|| panic!("{page}"))..];
    let cell = &row[row
        .find("class=\"publish-lateness\">")
        .unwrap_or_else(|| panic!("{row}"))..];
    assert!(
        cell.starts_with(&format!(
            "class=\"publish-lateness\">{:.3} s<",
            publish as f64 / 1000.0
        )),
        "{cell}"
    );
    assert!(
        page.contains("<polyline class=\"publish-lateness\""),
        "{page}"
    );
}

#[tokio::test]
async fn api_over_rabbitmq_and_redis() {
    scoped("dash-api", |env| async move {
        let config = cli::config(&env, &jobs(&env));
        producer(&env, "producer", &config);
        start_consumer(&env, &config, "c1");
        let d = dashboard::start(&env, "dashboard", &["dashboard", "--config", &config], "--addr", true).await;

        let doc = d.json("/api/v1/openapi.json").await;
        assert!(doc["paths"]["/api/v1/jobs/{job}/pause"]["post"].is_object(), "{doc}");
        assert!(doc["components"]["schemas"]["Run"]["properties"]["publish_lateness_ms"].is_object(), "{doc}");

        // Search, sort, pages.
        let v = d.json("/api/v1/jobs?q=REP").await;
        assert_eq!((v["total"].as_u64(), v["jobs"][0]["job"].as_str()), (Some(1), Some("report")), "{v}");
        let v = d.json("/api/v1/jobs?per_page=1&page=2&sort=name").await;
        assert_eq!((v["pages"].as_u64(), v["jobs"][0]["job"].as_str()), (Some(2), Some("report")), "{v}");
        let v = d.json("/api/v1/jobs?sort=name&order=desc").await;
        assert_eq!(v["jobs"][0]["job"], "report", "{v}");
        assert_eq!(v["jobs"][0]["next"]["utc"].as_str().map(|t| &t[10..]), Some("T01:30:00Z"), "{v}");

        // Errors are JSON with a message.
        let (status, v) = dashboard::get(&d.url("/api/v1/jobs/reprot")).await.unwrap();
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(v["error"].as_str().unwrap().ends_with("did you mean \"report\"?"), "{v}");
        let (status, v) = dashboard::get(&d.url("/api/v1/runs?outcome=great")).await.unwrap();
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(v["error"].as_str().unwrap().starts_with("outcome \"great\" is not one of"), "{v}");
        // A parameter that does not parse is named in the same JSON error, with its form.
        for (path, param) in [("/api/v1/jobs?page=abc", "page"), ("/api/v1/runs?per_page=many", "per_page")] {
            let (status, v) = dashboard::get(&d.url(path)).await.unwrap_or_else(|| panic!("GET {path}: not JSON"));
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {v}");
            let error = v["error"].as_str().unwrap_or_default();
            assert!(error.starts_with(&format!("query parameter {param}: ")) && error.contains("whole number"), "{path}: {v}");
        }

        // A login POST whose form did not come from this dashboard is forbidden (403), as
        // every other form; a wrong token is 401.
        let client = reqwest::Client::new();
        let login = |body: &'static str, cookie: Option<&'static str>| {
            let mut req = client
                .post(d.url("/login"))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body);
            if let Some(c) = cookie {
                req = req.header("cookie", c);
            }
            req.send()
        };
        for (body, cookie) in [("token=x&next=/", None), ("token=x&csrf=forged&next=/", Some("cronq_login=abc"))] {
            let resp = login(body, cookie).await.expect("POST /login answers");
            assert_eq!(resp.status(), StatusCode::FORBIDDEN, "{body} {cookie:?}");
        }
        // The real form with a wrong token: 401.
        let form = client.get(d.url("/login")).send().await.expect("GET /login answers");
        let nonce = form
            .headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok()?.strip_prefix("cronq_login=")?.split(';').next().map(str::to_owned))
            .next()
            .expect("the login cookie");
        let html = form.text().await.unwrap_or_default();
        let csrf = html
            .split("name=\"csrf\" value=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .expect("the login form's CSRF field");
        let resp = client
            .post(d.url("/login"))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("cookie", format!("cronq_login={nonce}"))
            .body(format!("token=wrong&csrf={csrf}&next=/"))
            .send()
            .await
            .expect("POST /login answers");
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);

        // A job: its config (no secrets), the next 10 fire times.
        let v = d.json("/api/v1/jobs/report").await;
        assert_eq!(v["next"].as_array().map(Vec::len), Some(10), "{v}");
        assert_eq!(v["config"]["timezone"], "Europe/Berlin");

        // Changes need the token.
        let note = "<script>alert(1)</script>";
        let (status, v) = d.post("/api/v1/jobs/report/pause", None, json!({ "note": note })).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{v}");
        let (status, v) = d.post("/api/v1/jobs/report/pause", Some("wrong-token-0123456789"), json!({ "note": note })).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{v}");
        let (status, v) = d.post("/api/v1/jobs/report/pause", Some(TOKEN), json!({ "note": note })).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        let jobs = cli::json(&env, &["jobs", "--json", "--config", &config]);
        let report = jobs["jobs"].as_array().unwrap().iter().find(|j| j["job"] == "report").unwrap();
        assert_eq!(report["paused"]["note"], note, "{jobs}");
        let (status, v) = d.post("/api/v1/jobs/report/resume", Some(TOKEN), json!({})).await;
        assert_eq!((status, v["was_paused"].as_bool()), (StatusCode::OK, Some(true)), "{v}");

        // Backfill: a preview first; a large range needs a confirmation.
        let range = json!({ "from": "2026-01-01T00:00:00Z", "to": "2026-01-10T23:59:59Z", "dry_run": true });
        let (status, v) = d.post("/api/v1/jobs/report/backfill", Some(TOKEN), range).await;
        assert_eq!((status, v["count"].as_u64()), (StatusCode::OK, Some(10)), "{v}");
        let large = json!({ "from": "1990-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z" });
        let (status, v) = d.post("/api/v1/jobs/report/backfill", Some(TOKEN), large).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
        assert!(v["error"].as_str().unwrap().contains("more than 10000"), "{v}");

        // Trigger: the run appears; a failing one ends in the dead-letter queue.
        let (status, v) = d.post("/api/v1/jobs/report/trigger", Some(TOKEN), json!({ "payload": { "x": 1 } })).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        let key = v["key"].as_str().unwrap().to_owned();
        run_of(&d, &key, "succeeded").await;
        let (status, v) = d.post("/api/v1/jobs/broken/trigger", Some(TOKEN), json!({})).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        let broken = v["key"].as_str().unwrap().to_owned();
        let failed = run_of(&d, &broken, "failed").await;
        assert!(failed["error"].as_str().unwrap().contains("boom"), "{failed}");
        // Asked by key, a run comes with its output; the Runs page shows it.
        assert_eq!(failed["output"]["stderr"], "boom\n", "{failed}");
        let page = text(&d.url(&format!("/runs?key={broken}"))).await;
        assert!(
            page.contains("<h2>Output</h2>") && page.contains("<h4>stderr</h4><pre class=\"output\">boom\n</pre>"),
            "{page}"
        );
        assert!(d.json("/api/v1/runs").await["runs"][0].get("output").is_none(), "only by key");
        let doc = d.json("/api/v1/openapi.json").await;
        assert!(doc["components"]["schemas"]["Run"]["properties"]["output"].is_object(), "{doc}");
        let letters = eventually(WAIT, "the dead letter", || async {
            let v = d.json("/api/v1/dead-letters").await;
            (v["count"] == 1).then_some(v)
        })
        .await;
        assert_eq!(letters["letters"][0]["key"], broken.as_str(), "{letters}");
        let (status, v) = d.post("/api/v1/dead-letters/replay", Some(TOKEN), json!({ "keys": [broken], "dry_run": true })).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        assert_eq!(v["entries"][0]["result"], "would replay", "{v}");
        assert_eq!(d.json("/api/v1/dead-letters").await["count"], 1);

        // The fleet: the leader, the consumer on its queue, the dead letter.
        let fleet = eventually(WAIT, "the fleet's state", || async {
            let v = d.json("/api/v1/fleet").await;
            let default = v["queues"].as_array()?.iter().find(|q| q["queue"] == "default")?.clone();
            (v["leader"]["epoch"].as_u64() >= Some(1) && default["consumers"].as_u64() >= Some(1) && v["dead_letters"] == 1).then_some(v)
        })
        .await;
        assert_eq!(fleet["jobs"], 2, "{fleet}");

        check_publish_lateness(&d, &d).await;
    })
    .await;
}

#[tokio::test]
async fn api_on_a_data_file() {
    scoped("dash-data", |env| async move {
        let file = DataFile::new(&env, &format!("{LEADER}\n{}", jobs(&env)));
        let config = file.config.to_string_lossy().into_owned();
        let data = file.arg();
        // The standalone serves the dashboard itself; `cronq dashboard --data` reads the
        // same file from another process.
        let inside = dashboard::standalone(&file, &[], true).await;
        let outside = dashboard::start(
            &env,
            "dashboard",
            &["dashboard", "--config", &config, "--data", &data],
            "--addr",
            false,
        )
        .await;
        let (status, v) = inside
            .post("/api/v1/jobs/report/trigger", Some(TOKEN), json!({}))
            .await;
        assert_eq!(status, StatusCode::OK, "{v}");
        let key = v["key"].as_str().unwrap().to_owned();
        run_of(&outside, &key, "succeeded").await;
        check_publish_lateness(&inside, &outside).await;
        // Read-only: the API refuses every change with 403, whatever the token.
        let (status, v) = outside
            .post("/api/v1/jobs/report/pause", Some(TOKEN), json!({}))
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{v}");
        assert!(
            v["error"]
                .as_str()
                .unwrap()
                .starts_with("the dashboard is read-only"),
            "{v}"
        );
        let (status, v) = inside
            .post(
                "/api/v1/jobs/report/pause",
                Some(TOKEN),
                json!({ "note": "maintenance" }),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{v}");
        let jobs = file.json(&["jobs", "--json"]);
        let report = jobs["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["job"] == "report")
            .unwrap();
        assert_eq!(report["paused"]["note"], "maintenance", "{jobs}");
        let v = outside.json("/api/v1/fleet").await;
        assert!(
            v["place"].as_str().unwrap().starts_with("data file "),
            "{v}"
        );
    })
    .await;
}

/// A Redis server of the test's own on a free port, killed on drop.
struct OwnRedis {
    child: std::process::Child,
    port: String,
}

impl OwnRedis {
    fn start(port: &str) -> Self {
        let child = std::process::Command::new("redis-server")
            .args([
                "--port",
                port,
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server (apt-get install redis-server)");
        Self {
            child,
            port: port.to_owned(),
        }
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn the_pages_say_when_redis_is_away_and_recover() {
    scoped("dash-outage", |env| async move {
        let config = cli::config(&env, &jobs(&env));
        let port = crate::support::free_addr()
            .rsplit(':')
            .next()
            .unwrap()
            .to_owned();
        let redis = OwnRedis::start(&port);
        let url = format!("redis://127.0.0.1:{}", redis.port);
        eventually(WAIT, "the test's Redis", || async {
            redis::Client::open(url.as_str())
                .ok()?
                .get_multiplexed_async_connection()
                .await
                .ok()
        })
        .await;
        let d = dashboard::start_with(
            &env,
            "dashboard",
            &["dashboard", "--config", &config],
            "--addr",
            true,
            &[("CRONQ_REDIS_URL", &url)],
        )
        .await;
        assert_eq!(d.json("/api/v1/fleet").await["outages"], json!([]));
        drop(redis);
        outage_shown(&d, "Redis", "/jobs").await;
        let _redis = OwnRedis::start(&port);
        eventually(WAIT, "the recovery", || async {
            let v = d.json("/api/v1/fleet").await;
            (v["outages"] == json!([])).then_some(())
        })
        .await;
    })
    .await;
}

/// Waits until the fleet's JSON shows `service` away, and asserts the page at `path` says
/// since when; returns the fleet's JSON.
async fn outage_shown(d: &dashboard::Dashboard, service: &str, path: &str) -> Value {
    let fleet = eventually(WAIT, "the outage shown", || async {
        let v = d.json("/api/v1/fleet").await;
        (v["outages"][0]["service"] == service).then_some(v)
    })
    .await;
    let page = text(&d.url(path)).await;
    assert!(
        page.contains(&format!("{service} is unreachable since")),
        "{fleet}\n{page}"
    );
    fleet
}

/// The ready messages of the logical queue `default` on the fleet's JSON.
fn default_depth(fleet: &Value) -> Option<u64> {
    fleet["queues"]
        .as_array()?
        .iter()
        .find(|q| q["queue"] == "default")?["messages"]
        .as_u64()
}

#[tokio::test]
async fn the_pages_say_when_rabbitmq_is_away_and_recover() {
    scoped("dash-amqp-outage", |env| async move {
        let config = cli::config(&env, &jobs(&env));
        let broker = rabbitmq::connect(&env).await;
        declare(&broker, &[&queue("default")]).await;
        // Only the dashboard goes through the proxy: the test reaches RabbitMQ directly.
        let proxy = Proxy::start("127.0.0.1:5672").await;
        let url = format!("amqp://guest:guest@{}/%2f", proxy.addr);
        let d = dashboard::start_with(
            &env,
            "dashboard",
            &["dashboard", "--config", &config],
            "--addr",
            true,
            &[("CRONQ_AMQP_URL", &url)],
        )
        .await;
        let replay = || {
            d.post(
                "/api/v1/dead-letters/replay",
                Some(TOKEN),
                json!({ "all": true }),
            )
        };
        eventually(WAIT, "the empty queue read", || async {
            let v = d.json("/api/v1/fleet").await;
            (v["outages"] == json!([]) && default_depth(&v) == Some(0)).then_some(())
        })
        .await;

        proxy.cut();
        let fleet = outage_shown(&d, "RabbitMQ", "/").await;
        let since = fleet["outages"][0]["since"].clone();
        assert!(
            since
                .as_str()
                .is_some_and(|s| s.parse::<chrono::DateTime<chrono::Utc>>().is_ok()),
            "{fleet}"
        );
        assert_eq!(
            fleet["outages"].as_array().map(Vec::len),
            Some(1),
            "only RabbitMQ is away: {fleet}"
        );
        // The queue changes meanwhile; the dashboard keeps the last state it read.
        publish_raw(broker.names(), "default", b"while RabbitMQ is away").await;
        let (status, v) = replay().await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
        assert!(
            v["error"]
                .as_str()
                .is_some_and(|e| e.contains("list dead letters")),
            "{v}"
        );
        let fleet = d.json("/api/v1/fleet").await;
        assert_eq!(fleet["outages"][0]["since"], since, "{fleet}");
        assert_eq!(
            default_depth(&fleet),
            Some(0),
            "the last state read: {fleet}"
        );

        proxy.restore();
        eventually(WAIT, "the recovery with the new depth", || async {
            let v = d.json("/api/v1/fleet").await;
            (v["outages"] == json!([]) && default_depth(&v) == Some(1)).then_some(())
        })
        .await;
        let page = text(&d.url("/")).await;
        assert!(!page.contains("is unreachable since"), "{page}");
        let (status, v) = replay().await;
        assert_eq!(status, StatusCode::OK, "{v}");

        // RabbitMQ hangs rather than refusing: the read gives up after 5 s, the same way.
        proxy.stall();
        let fleet = eventually(WAIT, "the hang shown", || async {
            let v = d.json("/api/v1/fleet").await;
            (v["outages"][0]["service"] == "RabbitMQ").then_some(v)
        })
        .await;
        assert!(
            fleet["outages"][0]["error"]
                .as_str()
                .is_some_and(|e| e.contains("no answer within")),
            "{fleet}"
        );
        publish_raw(broker.names(), "default", b"while RabbitMQ hangs").await;
        proxy.restore();
        eventually(WAIT, "the recovery from the hang", || async {
            let v = d.json("/api/v1/fleet").await;
            (v["outages"] == json!([]) && default_depth(&v) == Some(2)).then_some(())
        })
        .await;
        broker.close().await;
    })
    .await;
}
