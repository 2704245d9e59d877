//! Unit tests of loading: defaults, overrides, and the exact text of problems.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::*;

pub(super) fn now() -> DateTime<Utc> {
    "2026-01-15T00:00:00Z".parse().expect("valid instant")
}

pub(super) fn load(text: &str) -> Result<Config, ConfigError> {
    Config::from_toml_at(text, Path::new("cronq.toml"), now())
}

pub(super) fn problems(text: &str) -> Vec<String> {
    match load(text) {
        Ok(_) => panic!("config was accepted:\n{text}"),
        Err(ConfigError::Invalid { path, problems }) => {
            assert_eq!(path, Path::new("cronq.toml"));
            problems.iter().map(ToString::to_string).collect()
        }
        Err(other) => panic!("unexpected error {other}"),
    }
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[test]
fn builtin_defaults_apply_to_a_bare_job() {
    let config = load("[[job]]\nname = \"a\"\nschedule = \"@every 5m\"\n").unwrap();
    assert_eq!(
        config.leader,
        LeaderConfig {
            lease: secs(15),
            renew_deadline: secs(10),
            retry: secs(2)
        }
    );
    let job = &config.jobs[0];
    assert_eq!(job.name.as_str(), "a");
    assert_eq!(job.timezone, Tz::UTC);
    assert_eq!(job.timeout, secs(600));
    assert_eq!(job.overlap, Overlap::Skip);
    assert_eq!(job.catchup, Catchup::Latest);
    assert_eq!(job.catchup_window, secs(3600));
    assert_eq!(job.deadline, None);
    assert_eq!(job.max_attempts, 3);
    assert_eq!(job.backoff, secs(10));
    assert_eq!(job.backoff_max, secs(600));
    assert_eq!(job.jitter, Duration::ZERO);
    assert_eq!(job.queue.as_str(), "default");
    assert_eq!(job.retention, secs(7 * 24 * 3600));
    assert_eq!(job.payload, serde_json::json!({}));
    assert_eq!(job.handler, None);
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
}

#[test]
fn defaults_section_then_job_overrides() {
    let config = load(
        r#"
        [defaults]
        timezone = "Europe/Berlin"
        timeout = "1m"
        overlap = "queue"
        catchup = "all"
        catchup_window = "2h"
        deadline = "5m"
        max_attempts = 5
        backoff = "1s"
        backoff_max = "1m"
        queue = "reports"
        retention = "3d"

        [leader]
        lease = "30s"
        renew_deadline = "20s"
        retry = "5s"

        [[job]]
        name = "inherits"
        schedule = "0 3 * * *"

        [[job]]
        name = "overrides"
        schedule = "@every 1h"
        timezone = "Asia/Shanghai"
        timeout = "2h"
        overlap = "replace"
        catchup = "none"
        deadline = "none"
        max_attempts = 1
        queue = "fast"
        jitter = "30s"
        payload = { region = "cn", n = [1, 2.5], when = 2026-01-01T00:00:00Z }
        command = ["/bin/echo", "hi"]
        "#,
    )
    .unwrap();
    assert_eq!(config.leader.lease, secs(30));
    assert_eq!(config.leader.renew_deadline, secs(20));
    assert_eq!(config.leader.retry, secs(5));

    let a = config.job("inherits").unwrap();
    assert_eq!(a.timezone, chrono_tz::Europe::Berlin);
    assert_eq!(a.schedule.timezone(), chrono_tz::Europe::Berlin);
    assert_eq!(a.timeout, secs(60));
    assert_eq!(a.overlap, Overlap::Queue);
    assert_eq!(a.catchup, Catchup::All);
    assert_eq!(a.catchup_window, secs(7200));
    assert_eq!(a.deadline, Some(secs(300)));
    assert_eq!(a.max_attempts, 5);
    assert_eq!(a.backoff, secs(1));
    assert_eq!(a.backoff_max, secs(60));
    assert_eq!(a.queue.as_str(), "reports");
    assert_eq!(a.retention, secs(3 * 24 * 3600));

    let b = config.job("overrides").unwrap();
    assert_eq!(b.timezone, chrono_tz::Asia::Shanghai);
    assert_eq!(b.timeout, secs(7200));
    assert_eq!(b.overlap, Overlap::Replace);
    assert_eq!(b.catchup, Catchup::None);
    assert_eq!(b.deadline, None);
    assert_eq!(b.max_attempts, 1);
    assert_eq!(b.jitter, secs(30));
    assert_eq!(b.queue.as_str(), "fast");
    // Not overridden: still from [defaults].
    assert_eq!(b.backoff, secs(1));
    assert_eq!(b.retention, secs(3 * 24 * 3600));
    assert_eq!(
        b.payload,
        serde_json::json!({"region": "cn", "n": [1, 2.5], "when": "2026-01-01T00:00:00Z"})
    );
    assert_eq!(
        b.handler,
        Some(Handler::Command(Arc::new(CommandHandler::argv(vec![
            "/bin/echo".into(),
            "hi".into()
        ]))))
    );
    let queues: Vec<_> = config.queues().into_iter().map(|q| q.to_string()).collect();
    assert_eq!(queues, ["fast", "reports"]);
}

#[test]
fn http_handler_defaults_to_post() {
    let config = load(
        r#"
        [[job]]
        name = "sync"
        schedule = "@every 5m"
        http = { url = "https://example.com/sync", headers = { "X-Token" = "t" } }
        "#,
    )
    .unwrap();
    assert_eq!(
        config.jobs[0].handler,
        Some(Handler::Http(Arc::new(HttpHandler {
            url: Secret::inline("https://example.com/sync"),
            method: "POST".into(),
            headers: vec![("X-Token".into(), Secret::inline("t"))],
        })))
    );
}

#[test]
fn a_bad_default_is_reported_once_under_defaults() {
    assert_eq!(
        problems(
            r#"
            [defaults]
            timeout = "ten minutes"
            [[job]]
            name = "a"
            schedule = "@every 1m"
            [[job]]
            name = "b"
            schedule = "@every 1m"
            "#
        ),
        [
            "[defaults]: timeout: \"ten minutes\" is not a duration: use humantime syntax such as \"90s\", \"5m\" or \"1h 30m\""
        ]
    );
}

#[test]
fn backoff_order_is_checked_where_it_is_set() {
    assert_eq!(
        problems(
            r#"
            [defaults]
            backoff_max = "30s"
            [[job]]
            name = "a"
            schedule = "@every 1m"
            backoff = "1m"
            "#
        ),
        ["job \"a\": backoff: must not be longer than backoff_max (30s), got \"1m\""]
    );
}

#[test]
fn metrics_job_label_limit() {
    let job = "[[job]]\nname = \"a\"\nschedule = \"@every 5m\"\n";
    let limit = |head: &str| {
        load(&format!("{head}{job}"))
            .unwrap()
            .metrics
            .job_label_limit
    };
    assert_eq!(limit(""), Some(1000), "the default");
    assert_eq!(limit("[metrics]\njob_label_limit = 2\n"), Some(2));
    assert_eq!(limit("[metrics]\njob_label_limit = 0\n"), Some(0));
    assert_eq!(limit("[metrics]\njob_label_limit = \"unlimited\"\n"), None);
    assert_eq!(
        problems("[metrics]\njob_label_limit = -3\n"),
        [
            "[metrics]: job_label_limit: must be 0 or more (0: no job has a label of its own), got -3"
        ]
    );
    assert_eq!(
        problems("[metrics]\njob_labels = \"all\"\n"),
        ["[metrics]: job_labels: unknown field; did you mean \"job_label_limit\"?"]
    );
    assert_eq!(
        problems("[metric]\n"),
        ["metric: unknown section; did you mean \"metrics\"?"]
    );
}

#[test]
fn leader_order() {
    assert_eq!(
        problems("[leader]\nrenew_deadline = \"20s\"\n"),
        ["[leader]: renew_deadline: must be shorter than lease (15s), got \"20s\""]
    );
    assert_eq!(
        problems("[leader]\nlease = \"1m\"\nrenew_deadline = \"30s\"\nretry = \"30s\"\n"),
        ["[leader]: retry: must be shorter than renew_deadline (30s), got \"30s\""]
    );
}

#[test]
fn every_problem_of_every_job_is_listed() {
    assert_eq!(
        problems(
            r#"
            [defaults]
            overlap = "skipp"
            [[job]]
            schedule = "@every 1m"
            [[job]]
            name = "bad name"
            schedule = "@every 1m"
            [[job]]
            name = "x"
            schedule = "@every 1m"
            timezone = "Asia/Shangai"
            max_attempts = 0
            catchup = "some"
            deadline = "soon"
            queue = "a b"
            command = []
            [[job]]
            name = "x"
            schedule = "@every 1m"
            command = ["a"]
            http = { url = "ftp://user:pw@host/x", method = "FETCH" }
            "#
        ),
        [
            "[defaults]: overlap: \"skipp\" is not an overlap policy: use allow, skip, queue or replace; did you mean \"skip\"?",
            "job #1: name: is required: 1 to 128 characters from A-Z a-z 0-9 _ . -",
            "job #2: name: \"bad name\" is not a valid job name: expected 1 to 128 characters from A-Z a-z 0-9 _ . -",
            "job \"x\": timezone: \"Asia/Shangai\" is not an IANA time zone name; did you mean \"Asia/Shanghai\"?",
            "job \"x\": catchup: \"some\" is not a catch-up policy: use none, latest or all",
            "job \"x\": deadline: \"soon\" is neither a duration nor \"none\": use humantime syntax such as \"90s\", \"5m\" or \"1h 30m\", or \"none\"",
            "job \"x\": max_attempts: must be at least 1 (the first try counts), got 0",
            "job \"x\": queue: \"a b\" is not a valid queue name: expected 1 to 64 characters from A-Z a-z 0-9 _ . -",
            "job \"x\": command: is empty: give the program and its arguments, such as [\"/usr/local/bin/report\", \"--daily\"]",
            "job \"x\": name: \"x\" is already the name of job #3: job names must be unique",
            "job \"x\": http: is set together with command: a job has exactly one handler, so keep one of them (or neither, when an embedding program registers the handler)",
        ]
    );
}

#[test]
fn http_problems_hide_credentials() {
    assert_eq!(
        problems(
            r#"
            [[job]]
            name = "h"
            schedule = "@every 1m"
            http = { url = "ftp://user:pw@host/x", method = "FETCH", headers = { "X Y" = "v", "Z" = 1 } }
            "#
        ),
        [
            "job \"h\": http.url: \"ftp://***@host/x\" is not an http:// or https:// URL with a host, such as \"http://127.0.0.1:8080/sync\"",
            "job \"h\": http.method: \"FETCH\" is not an HTTP method: use GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS",
            "job \"h\": http.headers: \"X Y\" is not a valid header name: use letters, digits and -",
            "job \"h\": http.headers.Z: expected a string, { env = \"VARIABLE\" } or { file = \"/absolute/path\" }, got the integer 1",
        ]
    );
}

#[test]
fn http_secrets_come_from_the_environment_or_a_file_and_never_show() {
    let dir = std::env::temp_dir().join(format!("cronq-secrets-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, "s3cret-t0ken\n").unwrap();
    let url = dir.join("url");
    std::fs::write(&url, "http://app:pw@127.0.0.1:9/sync?k=s3cret-q").unwrap();
    let text = format!(
        r#"
        [[job]]
        name = "h"
        schedule = "@every 1m"
        http = {{ url = {{ file = "{}" }}, headers = {{ "X-Token" = {{ file = "{}" }}, "X-Path" = {{ env = "PATH" }} }} }}
        "#,
        url.display(),
        token.display()
    );
    let config = Config::from_toml(&text, Path::new("cronq.toml")).unwrap();
    let Some(Handler::Http(h)) = &config.jobs[0].handler else {
        panic!("an http handler")
    };
    assert_eq!(h.url.expose(), "http://app:pw@127.0.0.1:9/sync?k=s3cret-q");
    assert_eq!(h.url.origin(), &Origin::File(url.clone()));
    assert_eq!(
        h.headers[0].1.expose(),
        "s3cret-t0ken",
        "one trailing newline dropped"
    );
    assert_eq!(h.headers[1].1.expose(), std::env::var("PATH").unwrap());
    assert_eq!(h.headers[1].1.to_string(), "from env PATH");
    let shown = format!("{config:?}");
    assert!(
        !shown.contains("s3cret") && !shown.contains(":pw@"),
        "{shown}"
    );

    std::fs::write(&token, "").unwrap();
    let bad = format!(
        r#"
        [[job]]
        name = "h"
        schedule = "@every 1m"
        http = {{ url = {{ env = "CRONQ_TEST_NEVER_SET_URL" }}, headers = {{ "A" = {{ file = "{}" }}, "B" = {{ file = "relative/token" }}, "C" = {{ file = "/nonexistent/token" }}, "D" = {{ env = "X", file = "/y" }}, "E" = {{ }} }} }}
        "#,
        token.display()
    );
    assert_eq!(
        problems(&bad),
        [
            "job \"h\": http.url: the environment variable CRONQ_TEST_NEVER_SET_URL is not set: set it where cronq runs (it is read at start and at each reload)".to_owned(),
            format!("job \"h\": http.headers.A: the value from file {} is empty", token.display()),
            "job \"h\": http.headers.B: \"relative/token\" is not an absolute path: give one such as \"/run/secrets/token\"".to_owned(),
            "job \"h\": http.headers.C: cannot read the file /nonexistent/token: No such file or directory (os error 2)".to_owned(),
            "job \"h\": http.headers.D: expected a string, { env = \"VARIABLE\" } or { file = \"/absolute/path\" }, got a table with \"env\", \"file\"".to_owned(),
            "job \"h\": http.headers.E: expected a string, { env = \"VARIABLE\" } or { file = \"/absolute/path\" }, got a table with nothing in it".to_owned(),
        ]
    );
    std::fs::write(&url, "ftp://app:pw@host/s3cret").unwrap();
    let from_file = format!(
        "[[job]]\nname = \"h\"\nschedule = \"@every 1m\"\nhttp = {{ url = {{ file = \"{}\" }} }}\n",
        url.display()
    );
    assert_eq!(
        problems(&from_file),
        [format!(
            "job \"h\": http.url: the URL from file {} is not an http:// or https:// URL with a host, such as \"http://127.0.0.1:8080/sync\"",
            url.display()
        )]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn local_zone_is_refused() {
    assert_eq!(
        problems("[defaults]\ntimezone = \"local\"\n"),
        [
            "[defaults]: timezone: \"local\" is not an IANA time zone name: cronq never uses the machine's local zone; name one such as \"Europe/Berlin\" or \"UTC\""
        ]
    );
}

#[test]
fn risky_combinations_are_warnings() {
    let config = load(
        r#"
        [[job]]
        name = "w"
        schedule = "@every 10s"
        jitter = "10s"
        deadline = "5s"
        catchup = "all"
        catchup_window = "5s"
        retention = "1s"
        "#,
    )
    .unwrap();
    let warnings: Vec<String> = config.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        [
            "job \"w\": jitter: 10s is not shorter than the schedule's interval (10s): an occurrence may be published after the next one",
            "job \"w\": catchup_window: 5s is shorter than the schedule's interval (10s): catchup = \"all\" can recover at most one missed occurrence",
            "job \"w\": deadline: 5s is not longer than jitter (10s): occurrences delayed by jitter will be recorded as missed",
            "job \"w\": retention: 1s is shorter than catchup_window (5s): an occurrence published again by catch-up after its record expired would run again",
        ]
    );
}

#[test]
fn no_jobs_is_a_warning() {
    let config = load("").unwrap();
    assert!(config.jobs.is_empty());
    assert_eq!(
        config.warnings[0].to_string(),
        "no [[job]] is defined: nothing will be scheduled"
    );
}

#[test]
fn top_level_mistakes() {
    assert_eq!(
        problems("timezone = \"UTC\"\n[jobs]\n[job]\nname = \"a\"\n"),
        [
            "timezone: unknown top-level key; it belongs in [defaults] or in a [[job]]",
            "jobs: unknown section; did you mean \"job\"?",
            "job: expected an array of tables, written [[job]], got a table",
        ]
    );
}

#[test]
fn schedule_errors_read_after_the_schedule() {
    assert_eq!(
        problems(
            r#"
            [[job]]
            name = "nightly-report"
            schedule = "0 61 * * *"
            [[job]]
            name = "fast"
            schedule = "@every 5x"
            [[job]]
            name = "never"
            schedule = "0 0 30 2 *"
            [[job]]
            name = "missing"
            "#
        ),
        [
            "job \"nightly-report\": schedule: \"0 61 * * *\" is not a cron expression: hour 61 is outside 0-23",
            "job \"fast\": schedule: \"@every 5x\": \"5x\" is not a duration: use a number and a unit, such as \"90s\", \"5m\" or \"1h 30m\"",
            "job \"never\": schedule: \"0 0 30 2 *\" can never fire: no date matches its day-of-month, month and day-of-week fields",
            "job \"missing\": schedule: is required: a cron expression such as \"30 3 * * *\", or \"@every 5m\"",
        ]
    );
}

#[test]
fn hashed_fields_resolve_per_job_and_errors_name_the_job() {
    let config = load(
        r#"
        [[job]]
        name = "backup"
        schedule = "H H * * *"
        [[job]]
        name = "report"
        schedule = "H H * * *"
        "#,
    )
    .unwrap();
    assert_eq!(config.jobs[0].schedule.resolved(), Some("12 20 * * *"));
    assert_eq!(config.jobs[1].schedule.resolved(), Some("35 0 * * *"));
    assert_eq!(
        problems(
            r#"
            [[job]]
            name = "empty"
            schedule = "H(30-10) * * * *"
            [[job]]
            name = "zero"
            schedule = "H/0 * * * *"
            "#
        ),
        [
            "job \"empty\": schedule: \"H(30-10) * * * *\" is not a cron expression: minute \"H(30-10)\" has an empty range: write the smaller value first, such as H(10-30)",
            "job \"zero\": schedule: \"H/0 * * * *\" is not a cron expression: minute step in \"H/0\" must be a number in 1-60",
        ]
    );
}

#[test]
fn start_and_end_bound_the_fire_times() {
    let config = load(
        r#"
        [[job]]
        name = "campaign"
        schedule = "0 9 * * *"
        timezone = "Europe/Berlin"
        start_at = "2027-03-10T09:00:00"
        end_at = 2027-03-12T09:00:00+01:00
        "#,
    )
    .unwrap();
    let schedule = &config.jobs[0].schedule;
    let from: DateTime<Utc> = "2027-01-01T00:00:00Z".parse().unwrap();
    let times: Vec<String> = schedule.iter_after(from).map(|t| t.to_rfc3339()).collect();
    assert_eq!(
        times,
        [
            "2027-03-10T08:00:00+00:00",
            "2027-03-11T08:00:00+00:00",
            "2027-03-12T08:00:00+00:00",
        ],
        "both bounds included, a local start in the job's zone"
    );
    let unbounded = load("[[job]]\nname = \"campaign\"\nschedule = \"0 9 * * *\"\n").unwrap();
    assert_ne!(
        &unbounded.jobs[0].schedule, schedule,
        "bounds are part of the schedule"
    );
}

#[test]
fn bad_bounds_are_problems_and_a_past_end_a_warning() {
    assert_eq!(
        problems(
            r#"
            [[job]]
            name = "backwards"
            schedule = "@every 1m"
            start_at = "2027-03-10T09:00:00Z"
            end_at = "2027-03-10T09:00:00Z"
            [[job]]
            name = "garbled"
            schedule = "@every 1m"
            start_at = "next tuesday"
            [[job]]
            name = "gap"
            schedule = "@every 1m"
            timezone = "Europe/Berlin"
            end_at = "2027-03-28T02:30:00"
            [[job]]
            name = "number"
            schedule = "@every 1m"
            end_at = 5
            "#
        ),
        [
            "job \"backwards\": end_at: 2027-03-10T09:00:00+00:00 is not after start_at (2027-03-10T09:00:00+00:00): the job would never run; make end_at later",
            "job \"garbled\": start_at: \"next tuesday\" is not a date-time: use RFC 3339 such as \"2026-12-01T09:00:00+01:00\", or a local date-time in the job's zone such as \"2026-12-01T09:00:00\"",
            "job \"gap\": end_at: \"2027-03-28T02:30:00\" does not exist in Europe/Berlin (a daylight-saving gap): give another time or an RFC 3339 instant with its offset",
            "job \"number\": end_at: expected an RFC 3339 instant such as \"2026-12-01T09:00:00+01:00\", or a local date-time in the job's zone, got integer",
        ]
    );
    let config = load(
        "[[job]]\nname = \"over\"\nschedule = \"@every 1m\"\nend_at = \"2020-01-01T00:00:00Z\"\n",
    )
    .unwrap();
    let warnings: Vec<String> = config.warnings.iter().map(ToString::to_string).collect();
    assert!(
        warnings.iter().any(|w| w.contains(
            "job \"over\": end_at: 2020-01-01T00:00:00+00:00 is past: the job has no more occurrences; remove it or move end_at"
        )),
        "{warnings:?}"
    );
    assert_eq!(config.jobs[0].schedule.next_after(Utc::now()), None);
}

#[test]
fn pinned_jobs_in_dst_transitions_are_warned_about() {
    let config = load(
        r#"
        [defaults]
        timezone = "America/New_York"
        [[job]]
        name = "spring"
        schedule = "30 2 * * *"
        [[job]]
        name = "fall"
        schedule = "30 1 * * *"
        [[job]]
        name = "elapsed"
        schedule = "*/15 * * * *"
        "#,
    )
    .unwrap();
    let warnings: Vec<String> = config.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        [
            "job \"spring\": schedule: \"30 2 * * *\" fires at 02:30 which does not exist on 2026-03-08 in America/New_York (clocks spring forward): it runs at 03:00 EDT instead",
            "job \"fall\": schedule: \"30 1 * * *\" fires at 01:30 which occurs twice on 2026-11-01 in America/New_York (clocks fall back): it runs once, at the first pass (01:30 EDT)",
        ]
    );
}

#[test]
fn absurd_durations_are_refused() {
    assert_eq!(
        problems("[defaults]\nretention = \"1000years\"\ndeadline = \"200y\"\n"),
        [
            "[defaults]: retention: \"1000years\" is too long: at most 100 years",
            "[defaults]: deadline: \"200y\" is too long: at most 100 years",
        ]
    );
}

#[test]
fn jobs_with_the_same_schedule_and_zone_share_one_parsed_schedule() {
    let config = load(
        r#"
        [[job]]
        name = "a"
        schedule = "30 2 * * *"
        timezone = "Europe/Berlin"
        [[job]]
        name = "b"
        schedule = "30 2 * * *"
        timezone = "Europe/Berlin"
        [[job]]
        name = "c"
        schedule = "30 2 * * *"
        timezone = "America/New_York"
        [[job]]
        name = "d"
        schedule = "30 2 * * * "
        timezone = "Europe/Berlin"
        [[job]]
        name = "e"
        schedule = "@every 5m"
        [[job]]
        name = "f"
        schedule = "@every 5m"
        "#,
    )
    .unwrap();
    let s = |name: &str| &config.job(name).unwrap().schedule;
    assert!(s("a").shares_parsed(s("b")), "same text and zone: shared");
    assert!(s("e").shares_parsed(s("f")), "@every is shared too");
    assert!(!s("a").shares_parsed(s("c")), "another zone: its own");
    assert!(
        !s("a").shares_parsed(s("d")),
        "another text (as written): its own"
    );
    assert_eq!(s("a"), s("b"));
    assert_ne!(s("a"), s("c"));
    assert_ne!(s("a"), s("d"), "equality stays by text as written and zone");
    let from: DateTime<Utc> = now();
    assert_eq!(s("a").next_after(from), s("d").next_after(from));
    assert_ne!(s("a").next_after(from), s("c").next_after(from));
}

#[test]
fn shared_zone_transitions_give_the_same_warnings_as_fresh_ones() {
    // Many distinct pinned schedules in two zones: the loader finds each zone's
    // transitions once; every warning must match a schedule that found its own.
    let mut text = String::new();
    let mut expected = Vec::new();
    for (i, zone) in ["America/New_York", "Europe/Berlin"].iter().enumerate() {
        for hour in 0..4 {
            for minute in [0, 30, 59] {
                let name = format!("j{i}-{hour}-{minute}");
                let schedule = format!("{minute} {hour} * * *");
                text.push_str(&format!(
                    "[[job]]\nname = \"{name}\"\nschedule = \"{schedule}\"\ntimezone = \"{zone}\"\n"
                ));
                let fresh =
                    crate::schedule::Schedule::parse_at(&schedule, zone.parse().unwrap(), now())
                        .unwrap();
                for w in fresh.dst_warnings(now(), Duration::from_secs(366 * 24 * 3600)) {
                    expected.push(format!("job \"{name}\": schedule: {schedule:?} {w}"));
                }
            }
        }
    }
    let config = load(&text).unwrap();
    let warnings: Vec<String> = config.warnings.iter().map(ToString::to_string).collect();
    assert!(
        expected.len() >= 8,
        "the test needs warnings in both zones: {expected:?}"
    );
    assert_eq!(warnings, expected);
}

#[test]
fn a_command_takes_its_user_group_env_and_cwd() {
    let cfg = Config::from_toml(
        r#"
[[job]]
name = "who"
schedule = "@every 1m"
command = ["/usr/bin/report"]
user = "report"
group = "staff"
env = { LANG = "C.UTF-8", PATH = "/usr/bin" }
clear_env = true
cwd = "/srv/report"
"#,
        Path::new("cronq.toml"),
    )
    .unwrap();
    assert_eq!(
        cfg.jobs[0].handler,
        Some(Handler::Command(Arc::new(CommandHandler {
            argv: vec!["/usr/bin/report".into()],
            user: Some("report".into()),
            group: Some("staff".into()),
            env: vec![
                ("LANG".into(), "C.UTF-8".into()),
                ("PATH".into(), "/usr/bin".into())
            ],
            clear_env: true,
            cwd: Some("/srv/report".into()),
        })))
    );
}

#[test]
fn command_options_are_checked_and_only_for_a_command() {
    let err = Config::from_toml(
        r#"
[[job]]
name = "web"
schedule = "@every 1m"
http = { url = "http://127.0.0.1:8080/sync" }
user = "report"
cwd = "/srv"

[[job]]
name = "cmd"
schedule = "@every 1m"
command = ["true"]
user = " "
env = { "A=B" = "x", CRONQ_KEY = "mine" }
cwd = "relative/dir"
clear_env = "yes"
"#,
        Path::new("cronq.toml"),
    )
    .unwrap_err()
    .to_string();
    for expected in [
        "job \"web\": user: is only for a command handler",
        "job \"web\": cwd: is only for a command handler",
        "job \"cmd\": user: is empty",
        "job \"cmd\": env: \"A=B\" is not a variable name",
        "job \"cmd\": env: \"CRONQ_KEY\": the CRONQ_ variables are set by cronq",
        "job \"cmd\": cwd: \"relative/dir\" is not an absolute path",
        "job \"cmd\": clear_env: expected true or false",
    ] {
        assert!(err.contains(expected), "{expected} in:\n{err}");
    }
}

#[test]
fn an_sla_in_defaults_is_overridden_field_by_field() {
    let config = load(
        "[defaults]\nsla = { success_within = \"25h\", start_within = \"1m\" }\n\
         [[job]]\nname = \"a\"\nschedule = \"@every 5m\"\nsla = { max_duration = \"10m\", start_within = \"none\" }\n\
         [[job]]\nname = \"b\"\nschedule = \"@every 5m\"\n",
    )
    .unwrap();
    let a = config.job("a").unwrap();
    assert_eq!(
        a.sla,
        Sla {
            start_within: None,
            max_duration: Some(secs(600)),
            success_within: Some(secs(25 * 3600)),
        }
    );
    let b = config.job("b").unwrap();
    assert_eq!(b.sla.start_within, Some(secs(60)));
    assert!(!b.sla.watches_runs() || b.sla.start_within.is_some());
}

#[test]
fn sla_mistakes_name_the_field() {
    assert_eq!(
        problems(
            "[[job]]\nname = \"a\"\nschedule = \"@every 5m\"\nsla = { max_duraton = \"1m\", start_within = \"0s\", success_within = 5 }\n"
        ),
        [
            "job \"a\": sla.max_duraton: unknown field; did you mean \"max_duration\"?",
            "job \"a\": sla.start_within: must be longer than 0s (or \"none\"), got \"0s\"",
            "job \"a\": sla.success_within: expected a duration string such as \"10m\", or \"none\", got 5",
        ]
    );
}

#[test]
fn alert_sinks_resolve_with_their_defaults() {
    let config = load(
        "[[job]]\nname = \"a\"\nschedule = \"@every 5m\"\n\
         [[alert]]\nkind = \"webhook\"\nurl = \"https://hooks.example.com/x\"\nsecret = \"s3cret\"\n\
         [[alert]]\nname = \"mail\"\nkind = \"email\"\nsmtp = \"smtp.example.com\"\nfrom = \"c@example.com\"\nto = \"o@example.com\"\nevents = [\"sla\", \"missed\"]\nrepeat_interval = \"4h\"\n",
    )
    .unwrap();
    assert_eq!(config.alerts.len(), 2);
    let hook = &config.alerts[0];
    assert_eq!(hook.name, "webhook #1");
    assert_eq!(hook.events, default_events());
    assert!(!hook.events.contains(&AlertKind::AttemptFailed));
    assert_eq!(hook.repeat_interval, DEFAULT_REPEAT);
    assert!(
        matches!(&hook.target, AlertTarget::Webhook { secret: Some(s), .. } if s.expose() == "s3cret")
    );
    let mail = &config.alerts[1];
    let AlertTarget::Email(email) = &mail.target else {
        panic!("{mail:?}");
    };
    assert_eq!(
        (email.host.as_str(), email.port, email.tls),
        ("smtp.example.com", 587, EmailTls::Starttls)
    );
    assert_eq!(email.to, ["o@example.com"]);
    assert_eq!(
        mail.events.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
        ["missed", "late_start", "too_long", "no_success"]
    );
    assert_eq!(mail.repeat_interval, secs(4 * 3600));
}

#[test]
fn alert_mistakes_name_the_sink_and_the_field() {
    assert_eq!(
        problems(
            "[[job]]\nname = \"a\"\nschedule = \"@every 5m\"\n\
             [[alert]]\nname = \"hook\"\nkind = \"webhook\"\nevents = [\"dead_letered\"]\nsmtp = \"x:25\"\n\
             [[alert]]\nkind = \"email\"\nsmtp = \"mail:99999\"\nfrom = \"nobody\"\nto = []\nusername = \"u\"\n\
             [[alert]]\nkind = \"pager\"\n\
             [[alert]]\nname = \"hook\"\nkind = \"slack\"\nurl = \"ftp://x\"\n"
        ),
        [
            "alert \"hook\": url: is missing: give the address to POST to, such as \"https://hooks.example.com/cronq\" (or { env = \"VARIABLE\" })",
            "alert \"hook\": smtp: is only for kind email: remove it",
            "alert \"hook\": events: \"dead_letered\" is not an event; did you mean \"dead_lettered\"?",
            "alert #2: smtp: \"mail:99999\" is not \"host:port\" with a port from 1 to 65535",
            "alert #2: from: \"nobody\" is not an email address such as \"cronq@example.com\"",
            "alert #2: to: is empty: give at least one recipient",
            "alert #2: password: username and password go together: give both, or neither",
            "alert #3: kind: \"pager\" is not a kind of alert sink: use \"webhook\", \"slack\" or \"email\"",
            "alert \"hook\": url: \"ftp://x\" is not an http(s) URL",
        ]
    );
}

#[test]
fn a_one_shot_takes_no_schedules_exclusions_or_calendars() {
    assert_eq!(
        problems(
            "[[job]]\nname = \"o\"\nat = \"2026-12-24T10:00:00Z\"\nschedules = [\"@hourly\"]\nexclude = [\"2026-12-25\"]\n"
        ),
        [
            "job \"o\": at: is set together with schedules, exclude or calendars: a one-shot job runs once at `at`; remove them"
        ]
    );
}
