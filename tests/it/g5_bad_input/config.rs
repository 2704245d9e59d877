//! A bad config is rejected whole, each problem named by file, job and field.
//!
//! `cronq check` through the real binary: exit codes and the exact text of every kind of
//! config problem (the formats of `docs/config.md`, "Checking a config"), and the summary of a
//! good config.
//!
//! These tests need no RabbitMQ or Redis: loading a config never connects.

use std::path::PathBuf;
use std::process::Command;

use crate::support::config_dir::{ConfigDir, stderr, stdout};

/// Asserts `cronq check --config cronq.toml` exits 2 with exactly `expected` on stderr and
/// nothing on stdout.
#[track_caller]
fn assert_rejected(test: &str, config: &str, expected: &str) {
    let dir = ConfigDir::with(test, config);
    let out = dir.run(&["check", "--config", "cronq.toml"]);
    assert_eq!(stderr(&out), expected, "config:\n{config}");
    assert_eq!(out.status.code(), Some(2), "config:\n{config}");
    assert_eq!(stdout(&out), "");
}

#[test]
fn unknown_field_gets_a_suggestion() {
    assert_rejected(
        "unknown-field",
        "[defaults]\ntimout = \"1m\"\n[leader]\nleese = \"1m\"\n[[job]]\nname = \"a\"\nschedual = \"@every 1m\"\nzzz = 1\n",
        "cronq: invalid config (5 problems):
cronq.toml: [defaults]: timout: unknown field; did you mean \"timeout\"?
cronq.toml: [leader]: leese: unknown field; did you mean \"lease\"?
cronq.toml: job \"a\": schedual: unknown field; did you mean \"schedule\"?
cronq.toml: job \"a\": zzz: unknown field; allowed: name, schedule, schedules, exclude, calendars, payload, pool, handler, command, http, user, group, env, clear_env, cwd, start_at, end_at, at, after, timezone, timeout, overlap, catchup, catchup_window, deadline, max_attempts, backoff, backoff_max, jitter, queue, retention, max_concurrent, sla
cronq.toml: job \"a\": schedule: is required: a cron expression such as \"30 3 * * *\", or \"@every 5m\"
",
    );
}

#[test]
fn bad_limits_and_pools() {
    assert_rejected(
        "limits",
        "[pools.reports]\nsize = 0\n[pools.batch]\nsize = 2\n\
         [[job]]\nname = \"a\"\nschedule = \"@daily\"\nmax_concurrent = 0\ncommand = [\"true\"]\n\
         [[job]]\nname = \"b\"\nschedule = \"@daily\"\npool = \"bacth\"\ncommand = [\"true\"]\n",
        "cronq: invalid config (3 problems):
cronq.toml: [pools.reports]: size: must be at least 1 (how many runs of the pool's jobs may run at once), got 0: give it 1 or more, or remove the pool and its jobs' pool = \"reports\"
cronq.toml: job \"a\": max_concurrent: must be at least 1 (how many occurrences of the job may run at once, fleet-wide), got 0: give it 1 or more, or remove it (one at a time under overlap skip, queue or replace)
cronq.toml: job \"b\": pool: \"bacth\" is not a [pools.NAME] of this file; did you mean \"batch\"?: define it with [pools.bacth] size = N, or remove pool from the job
",
    );
}

#[test]
fn toml_syntax_error_has_line_and_column() {
    assert_rejected(
        "syntax",
        "[defaults]\ntimeout = \"10m\"\nqueue = \n",
        "cronq: invalid config (1 problem):
cronq.toml: line 3, column 9: not valid TOML: string values must be quoted, expected literal string
",
    );
}

#[test]
fn type_errors_name_the_field_and_the_allowed_form() {
    assert_rejected(
        "types",
        "[[job]]\nname = \"a\"\nschedule = \"@every 1m\"\nmax_attempts = \"3\"\ncommand = \"ls\"\n\n[[job]]\nname = \"b\"\nschedule = 5\ntimeout = 30\npayload = \"x\"\n",
        "cronq: invalid config (5 problems):
cronq.toml: job \"a\": max_attempts: expected an integer such as 3, got the string \"3\"
cronq.toml: job \"a\": command: expected an array of strings such as [\"/usr/local/bin/report\", \"--daily\"], got the string \"ls\"
cronq.toml: job \"b\": schedule: expected a string such as \"30 3 * * *\" or \"@every 5m\", got the integer 5
cronq.toml: job \"b\": timeout: expected a duration string such as \"10m\", got the integer 30
cronq.toml: job \"b\": payload: expected a table such as { region = \"cn\" }, got the string \"x\"
",
    );
}

#[test]
fn bad_cron_expression() {
    assert_rejected(
        "bad-cron",
        "[[job]]\nname = \"nightly-report\"\nschedule = \"61 0 * * *\"\n",
        "cronq: invalid config (1 problem):
cronq.toml: job \"nightly-report\": schedule: \"61 0 * * *\" is not a cron expression: minute 61 is outside 0-59
",
    );
}

#[test]
fn bad_timezone_gets_a_suggestion() {
    assert_rejected(
        "bad-tz",
        "[defaults]\ntimezone = \"local\"\n[[job]]\nname = \"a\"\nschedule = \"@daily\"\ntimezone = \"Europe/Berln\"\n[[job]]\nname = \"b\"\nschedule = \"@daily\"\ntimezone = \"Mars/Olympus\"\n",
        "cronq: invalid config (3 problems):
cronq.toml: [defaults]: timezone: \"local\" is not an IANA time zone name: cronq never uses the machine's local zone; name one such as \"Europe/Berlin\" or \"UTC\"
cronq.toml: job \"a\": timezone: \"Europe/Berln\" is not an IANA time zone name; did you mean \"Europe/Berlin\"?
cronq.toml: job \"b\": timezone: \"Mars/Olympus\" is not an IANA time zone name: use one such as \"Europe/Berlin\", \"America/New_York\" or \"UTC\"
",
    );
}

#[test]
fn bad_durations_and_enums() {
    assert_rejected(
        "bad-duration",
        "[defaults]\nretention = \"a week\"\n[[job]]\nname = \"a\"\nschedule = \"@hourly\"\ntimeout = \"0s\"\ndeadline = \"soon\"\noverlap = \"Skip\"\n",
        "cronq: invalid config (4 problems):
cronq.toml: [defaults]: retention: \"a week\" is not a duration: use humantime syntax such as \"90s\", \"5m\" or \"1h 30m\"
cronq.toml: job \"a\": timeout: must be longer than 0s, got \"0s\"
cronq.toml: job \"a\": overlap: \"Skip\" is not an overlap policy: use allow, skip, queue or replace; did you mean \"skip\"?
cronq.toml: job \"a\": deadline: \"soon\" is neither a duration nor \"none\": use humantime syntax such as \"90s\", \"5m\" or \"1h 30m\", or \"none\"
",
    );
}

#[test]
fn bad_named_handlers() {
    assert_rejected(
        "named-handlers",
        r#"[handlers.report]
command = ["/bin/true"]
schedule = "@hourly"

[handlers.none]
user = "nobody"

[handlers."bad name"]
http = { url = "http://127.0.0.1:8080/x" }

[[job]]
name = "both"
schedule = "@hourly"
handler = "report"
command = ["/bin/true"]

[[job]]
name = "cwd"
schedule = "@hourly"
handler = "report"
cwd = "/srv"
"#,
        "cronq: invalid config (6 problems):
cronq.toml: [handlers.report]: schedule: belongs in a [[job]], not in a named handler: a handler says only how a job runs (command or http, and how the command starts)
cronq.toml: [handlers.none]: has no handler: give it command = [\"/path/to/program\", \"arg\"] or http = { url = \"http://…\" }
cronq.toml: [handlers.none]: user: is only for a command handler: remove it, or give the job a command
cronq.toml: [handlers.\"bad name\"]: \"bad name\" is not a handler name: 1 to 128 characters from A-Z a-z 0-9 _ . -
cronq.toml: job \"both\": command: is set together with handler = \"report\": a job has exactly one handler, so keep the named one or the inline one
cronq.toml: job \"cwd\": cwd: is only for an inline command handler: set it in [handlers.report] instead
",
    );
}

#[test]
fn a_job_naming_an_unknown_handler_is_a_warning() {
    let dir = ConfigDir::with(
        "unknown-handler",
        "[handlers.report]\ncommand = [\"/bin/true\"]\n[[job]]\nname = \"a\"\nschedule = \"@hourly\"\nhandler = \"reprot\"\n",
    );
    let out = dir.run(&["check", "--config", "cronq.toml"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "cronq.toml: warning: job \"a\": handler: \"reprot\" is not a [handlers.NAME] of this file (did you mean \"report\"?): a consumer must define it or register it in Rust, or its occurrences are dead-lettered\n"
    );
}

#[test]
fn duplicate_names() {
    assert_rejected(
        "duplicate",
        "[[job]]\nname = \"a\"\nschedule = \"@hourly\"\n[[job]]\nname = \"b\"\nschedule = \"@hourly\"\n[[job]]\nname = \"a\"\nschedule = \"@daily\"\n",
        "cronq: invalid config (1 problem):
cronq.toml: job \"a\": name: \"a\" is already the name of job #1: job names must be unique
",
    );
}

#[test]
fn two_handlers_and_bad_handlers() {
    assert_rejected(
        "handlers",
        r#"[[job]]
name = "both"
schedule = "@hourly"
command = ["/bin/true"]
http = { url = "http://127.0.0.1:8080/x" }

[[job]]
name = "empty"
schedule = "@hourly"
command = []

[[job]]
name = "web"
schedule = "@hourly"
http = { url = "ftp://user:secret@example.com/", method = "FETCH", header = {} }
"#,
        "cronq: invalid config (5 problems):
cronq.toml: job \"both\": http: is set together with command: a job has exactly one handler, so keep one of them (or neither, when an embedding program registers the handler)
cronq.toml: job \"empty\": command: is empty: give the program and its arguments, such as [\"/usr/local/bin/report\", \"--daily\"]
cronq.toml: job \"web\": http.header: unknown field; did you mean \"headers\"?
cronq.toml: job \"web\": http.url: \"ftp://***@example.com/\" is not an http:// or https:// URL with a host, such as \"http://127.0.0.1:8080/sync\"
cronq.toml: job \"web\": http.method: \"FETCH\" is not an HTTP method: use GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS
",
    );
}

#[test]
fn leader_ordering() {
    assert_rejected(
        "leader",
        "[leader]\nrenew_deadline = \"20s\"\nretry = \"30s\"\n",
        "cronq: invalid config (2 problems):
cronq.toml: [leader]: renew_deadline: must be shorter than lease (15s), got \"20s\"
cronq.toml: [leader]: retry: must be shorter than renew_deadline (20s), got \"30s\"
",
    );
}

#[test]
fn metrics_section_names_the_field() {
    assert_rejected(
        "metrics",
        "job_label_limit = 5\n[metrics]\njob_label_limt = 5\n",
        "cronq: invalid config (2 problems):
cronq.toml: job_label_limit: unknown top-level key; it belongs in [metrics]
cronq.toml: [metrics]: job_label_limt: unknown field; did you mean \"job_label_limit\"?
",
    );
    for (value, message) in [
        (
            "-1",
            "must be 0 or more (0: no job has a label of its own), got -1",
        ),
        (
            "\"all\"",
            "expected an integer such as 1000, or \"unlimited\", got the string \"all\"",
        ),
        (
            "1.5",
            "expected an integer such as 1000, or \"unlimited\", got the number 1.5",
        ),
    ] {
        assert_rejected(
            "metrics-value",
            &format!("[metrics]\njob_label_limit = {value}\n"),
            &format!(
                "cronq: invalid config (1 problem):\ncronq.toml: [metrics]: job_label_limit: {message}\n"
            ),
        );
    }
}

#[test]
fn missing_schedule_and_bad_or_missing_name() {
    assert_rejected(
        "names",
        "[[job]]\nname = \"nightly report\"\nschedule = \"@daily\"\n[[job]]\nschedule = \"@daily\"\n[[job]]\nname = \"ok\"\n",
        "cronq: invalid config (3 problems):
cronq.toml: job #1: name: \"nightly report\" is not a valid job name: expected 1 to 128 characters from A-Z a-z 0-9 _ . -
cronq.toml: job #2: name: is required: 1 to 128 characters from A-Z a-z 0-9 _ . -
cronq.toml: job \"ok\": schedule: is required: a cron expression such as \"30 3 * * *\", or \"@every 5m\"
",
    );
}

#[test]
fn several_problems_in_several_jobs_at_once() {
    assert_rejected(
        "several",
        r#"[defaults]
max_attempts = 0

[leader]
lease = "5s"

[[job]]
name = "nightly-report"
schedule = "30 3 * * 8"
timezone = "Asia/Shanghia"
queue = "reports!"

[[job]]
name = "sync-orders"
schedule = "@every 500ms"
backoff = "1h"
payload = { ratio = nan }

[[job]]
name = "nightly-report"
schedule = "@daily"
max_attempts = "many"
"#,
        "cronq: invalid config (10 problems):
cronq.toml: [defaults]: max_attempts: must be at least 1 (the first try counts), got 0
cronq.toml: [leader]: renew_deadline: must be shorter than lease (5s), got \"10s\"
cronq.toml: job \"nightly-report\": timezone: \"Asia/Shanghia\" is not an IANA time zone name; did you mean \"Asia/Shanghai\"?
cronq.toml: job \"nightly-report\": queue: \"reports!\" is not a valid queue name: expected 1 to 64 characters from A-Z a-z 0-9 _ . -
cronq.toml: job \"nightly-report\": schedule: \"30 3 * * 8\" is not a cron expression: day-of-week 8 is outside 0-7 or SUN-SAT
cronq.toml: job \"sync-orders\": backoff: must not be longer than backoff_max (10m), got \"1h\"
cronq.toml: job \"sync-orders\": schedule: \"@every 500ms\": \"500ms\" is shorter than 1s: @every needs at least one second
cronq.toml: job \"sync-orders\": payload.ratio: NaN cannot be represented in JSON: use a finite number or a string
cronq.toml: job \"nightly-report\": name: \"nightly-report\" is already the name of job #1: job names must be unique
cronq.toml: job \"nightly-report\": max_attempts: expected an integer such as 3, got the string \"many\"
",
    );
}

#[test]
fn missing_file() {
    let dir = ConfigDir::new("missing-file");
    let out = dir.run(&["check", "--config", "nope.toml"]);
    assert_eq!(
        stderr(&out),
        "cronq: nope.toml: cannot read file: No such file or directory (os error 2)\n"
    );
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn missing_config_flag() {
    let dir = ConfigDir::new("missing-flag");
    // `next` without a file reads the config its target runs (tests/it/operations/recorded.rs).
    let out = dir.run(&["check"]);
    assert_eq!(
        stderr(&out),
        "cronq: no config file: pass --config FILE or set CRONQ_CONFIG\n"
    );
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn next_reports_config_problems_too() {
    let dir = ConfigDir::with("next-bad", "[[job]]\nname = \"a\"\n");
    let out = dir.run(&["next", "--config", "cronq.toml"]);
    assert_eq!(
        stderr(&out),
        "cronq: invalid config (1 problem):
cronq.toml: job \"a\": schedule: is required: a cron expression such as \"30 3 * * *\", or \"@every 5m\"
"
    );
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn check_summarises_a_good_config() {
    let dir = ConfigDir::with(
        "check-ok",
        r#"[[job]]
name = "report"
schedule = "30 3 * * *"
queue = "reports"
command = ["/bin/echo", "hi"]

[[job]]
name = "sync"
schedule = "@every 10s"
jitter = "10s"
http = { url = "http://127.0.0.1:8080/sync" }

[[job]]
name = "embedded"
schedule = "@every 1m"
"#,
    );
    let out = dir.run(&["check", "--config", "cronq.toml"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "cronq.toml: ok: 3 jobs, 2 queues (default, reports)
cronq.toml: note: job \"embedded\" has no handler in the file: a program embedding the consumer library must register one for it
"
    );
    assert_eq!(
        stderr(&out),
        "cronq.toml: warning: job \"sync\": jitter: 10s is not shorter than the schedule's interval (10s): an occurrence may be published after the next one\n"
    );
}

#[test]
fn check_takes_the_config_from_the_environment() {
    let dir = ConfigDir::with(
        "check-env",
        "[[job]]\nname = \"a\"\nschedule = \"@hourly\"\ncommand = [\"/bin/true\"]\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_cronq"))
        .arg("check")
        .current_dir(&dir.dir)
        .env("CRONQ_CONFIG", "cronq.toml")
        .env_remove("RUST_LOG")
        .output()
        .expect("run cronq");
    assert_eq!(stdout(&out), "cronq.toml: ok: 1 job, 1 queue (default)\n");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn the_example_config_passes_check() {
    let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/cronq.example.toml");
    let dir = ConfigDir::new("example");
    let path = example.to_str().expect("utf-8 path");
    let out = dir.run(&["check", "--config", path]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let summary = stdout(&out);
    assert!(summary.starts_with(&format!("{path}: ok: ")), "{summary}");
    // Every job of the example runs as it is: none waits for an embedding program.
    assert!(!summary.contains("has no handler in the file"), "{summary}");
}
