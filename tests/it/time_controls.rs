//! Time controls through real processes: `start_at` and `end_at` bound what runs;
//! `exclude` (and calendars) take occurrences out and `schedules` unites several, in what
//! runs, in what `cronq verify` expects, and in what `cronq next` lists.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};

use crate::support::backends::Backend;
use crate::support::deployment::{Deployment, LEADER, Running, argv};
use crate::support::{TestEnv, eventually, scoped};

/// The scheduled instants of the runs the job's command wrote, one line per run.
fn runs(env: &TestEnv) -> Vec<DateTime<Utc>> {
    std::fs::read_to_string(env.dir.join("runs.txt"))
        .unwrap_or_default()
        .lines()
        .map(|k| {
            let at = k.strip_prefix("bounded@").expect("key of job bounded");
            DateTime::parse_from_rfc3339(at)
                .expect("RFC 3339")
                .with_timezone(&Utc)
        })
        .collect()
}

/// `@every 1s` between a `start_at` a few seconds ahead and an `end_at` three seconds
/// later runs exactly the four seconds from one to the other, both included.
#[tokio::test(flavor = "multi_thread")]
async fn start_at_and_end_at_bound_the_runs_of_a_standalone() {
    scoped("bounds_standalone", |env| async move {
        let start = DateTime::from_timestamp(Utc::now().timestamp() + 6, 0).expect("in range");
        let end = start + chrono::Duration::seconds(3);
        let fmt = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Secs, true);
        let config = env.write_config(
            "cronq.toml",
            &format!(
                r#"
[[job]]
name = "bounded"
schedule = "@every 1s"
start_at = "{}"
end_at = "{}"
command = ["/bin/sh", "-c", "echo \"$CRONQ_KEY\" >> runs.txt"]
"#,
                fmt(start),
                fmt(end)
            ),
        );
        let next = env.run(&[
            "next",
            "--config",
            config.to_str().unwrap(),
            "--json",
            "--count",
            "10",
        ]);
        let doc: serde_json::Value = serde_json::from_slice(&next.stdout).expect("next JSON");
        let listed: Vec<&str> = doc["jobs"][0]["next"]
            .as_array()
            .expect("next")
            .iter()
            .map(|t| t["utc"].as_str().expect("utc"))
            .collect();
        let want: Vec<String> = (0..4)
            .map(|i| fmt(start + chrono::Duration::seconds(i)))
            .collect();
        assert_eq!(listed, want, "cronq next lists only the bounded seconds");

        let pid = env.spawn(
            "standalone",
            &[
                "standalone",
                "--config",
                config.to_str().unwrap(),
                "--data",
                ":memory:",
                "--grace",
                "5s",
            ],
        );
        // Until two seconds past the end: a run after end_at would show by then.
        eventually(
            Duration::from_secs(30),
            "two seconds past end_at",
            || async {
                (Utc::now() > end + chrono::Duration::seconds(2) && runs(&env).len() >= 4)
                    .then_some(())
            },
        )
        .await;
        let ran = runs(&env);
        let want: Vec<DateTime<Utc>> = (0..4)
            .map(|i| start + chrono::Duration::seconds(i))
            .collect();
        assert_eq!(
            ran,
            want,
            "exactly the seconds from start_at to end_at; log:\n{}",
            env.log("standalone")
        );
        env.signal(pid, nix::sys::signal::Signal::SIGTERM);
        assert_eq!(env.wait(pid, Duration::from_secs(10)), Some(0));
    })
    .await;
}

/// The scheduled instants of job `job` in `file`, one key per line, in the order run.
fn runs_of(env: &TestEnv, file: &str, job: &str) -> Vec<DateTime<Utc>> {
    std::fs::read_to_string(env.dir.join(file))
        .unwrap_or_default()
        .lines()
        .map(|k| {
            let at = k.strip_prefix(&format!("{job}@")).expect("key of the job");
            DateTime::parse_from_rfc3339(at)
                .expect("RFC 3339")
                .with_timezone(&Utc)
        })
        .collect()
}

/// Through a real standalone: `@every 1s` less `exclude = ["*/2 * * * * *"]` runs only the
/// odd seconds, and the union of `*/2` and `*/3` seconds runs each instant of either once
/// (6, 12, … are in both), with no gap between the first and the last run.
#[tokio::test(flavor = "multi_thread")]
async fn exclusions_and_unions_decide_what_a_standalone_runs() {
    scoped("controls_standalone", |env| async move {
        let config = env.write_config(
            "cronq.toml",
            r#"
[[job]]
name = "odd"
schedule = "@every 1s"
exclude = ["*/2 * * * * *"]
overlap = "allow"
command = ["/bin/sh", "-c", "echo \"$CRONQ_KEY\" >> odd.txt"]

[[job]]
name = "union"
schedules = ["*/2 * * * * *", "*/3 * * * * *"]
overlap = "allow"
command = ["/bin/sh", "-c", "echo \"$CRONQ_KEY\" >> union.txt"]
"#,
        );
        let pid = env.spawn(
            "standalone",
            &[
                "standalone",
                "--config",
                config.to_str().unwrap(),
                "--data",
                ":memory:",
                "--grace",
                "5s",
            ],
        );
        eventually(Duration::from_secs(40), "six runs of each job", || async {
            (runs_of(&env, "odd.txt", "odd").len() >= 6
                && runs_of(&env, "union.txt", "union").len() >= 6)
                .then_some(())
        })
        .await;
        env.signal(pid, nix::sys::signal::Signal::SIGTERM);
        assert_eq!(env.wait(pid, Duration::from_secs(10)), Some(0));
        let log = env.log("standalone");

        let mut odd = runs_of(&env, "odd.txt", "odd");
        odd.sort();
        assert!(
            odd.iter().all(|t| t.timestamp() % 2 == 1),
            "only odd seconds: {odd:?}\n{log}"
        );
        let steps: Vec<i64> = odd
            .windows(2)
            .map(|w| (w[1] - w[0]).num_seconds())
            .collect();
        assert!(
            steps.iter().all(|s| *s == 2),
            "every odd second once: {odd:?}\n{log}"
        );

        let mut union = runs_of(&env, "union.txt", "union");
        union.sort();
        let mut unique = union.clone();
        unique.dedup();
        assert_eq!(union, unique, "each instant once: {union:?}\n{log}");
        let (first, last) = (union[0].timestamp(), union[union.len() - 1].timestamp());
        let want: Vec<i64> = (first..=last)
            .filter(|s| s % 2 == 0 || s % 3 == 0)
            .collect();
        let got: Vec<i64> = union.iter().map(DateTime::timestamp).collect();
        assert_eq!(got, want, "every second of either, none else\n{log}");
    })
    .await;
}

/// `cronq next` lists the union of `schedules` less `exclude` and the calendar's dates,
/// and `cronq check` names the file, the job or calendar, and the field of each mistake.
#[tokio::test(flavor = "multi_thread")]
async fn cronq_next_shows_the_union_less_the_exclusions_and_check_names_each_mistake() {
    scoped("controls_next", |env| async move {
        std::fs::write(
            env.dir.join("holidays.ics"),
            "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//t//EN\r\nBEGIN:VEVENT\r\nUID:1\r\nDTSTAMP:20260101T000000Z\r\nDTSTART;VALUE=DATE:20261228\r\nSUMMARY:Day off\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n",
        )
        .unwrap();
        let config = env.write_config(
            "cronq.toml",
            r#"
[calendars.holidays]
dates = ["2026-12-31"]
ics = "holidays.ics"

[[job]]
name = "office"
schedules = ["0 9 * * MON-FRI", "0 11 * * SAT", "0 9 * * MON"]
exclude = ["2026-12-25", "0 9 * * WED"]
calendars = ["holidays"]
command = ["true"]
"#,
        );
        let next = env.run(&[
            "next",
            "--config",
            config.to_str().unwrap(),
            "--json",
            "--count",
            "6",
            "--from",
            "2026-12-22T00:00:00Z",
        ]);
        assert!(next.status.success(), "{next:?}");
        let doc: serde_json::Value = serde_json::from_slice(&next.stdout).expect("next JSON");
        let listed: Vec<&str> = doc["jobs"][0]["next"]
            .as_array()
            .expect("next")
            .iter()
            .map(|t| t["utc"].as_str().expect("utc"))
            .collect();
        // Tue 22 (9:00), Wed 23 excluded by cron, Thu 24, Fri 25 excluded by date, Sat 26
        // (11:00), Mon 28 in the .ics, Tue 29, Wed 30 excluded, Thu 31 in the dates,
        // Fri 2027-01-01, Sat 01-02 (11:00).
        assert_eq!(
            listed,
            [
                "2026-12-22T09:00:00Z",
                "2026-12-24T09:00:00Z",
                "2026-12-26T11:00:00Z",
                "2026-12-29T09:00:00Z",
                "2027-01-01T09:00:00Z",
                "2027-01-02T11:00:00Z",
            ]
        );
        assert_eq!(
            doc["jobs"][0]["schedule"],
            "0 9 * * MON-FRI | 0 11 * * SAT | 0 9 * * MON except 2026-12-25, 0 9 * * WED, calendar holidays"
        );

        std::fs::write(env.dir.join("broken.ics"), "BEGIN:VCALENDAR\r\nnonsense").unwrap();
        let bad = env.write_config(
            "bad.toml",
            r#"
[calendars.broken]
ics = "broken.ics"

[[job]]
name = "both"
schedule = "@daily"
schedules = ["@hourly"]
command = ["true"]

[[job]]
name = "empty"
schedules = []
command = ["true"]

[[job]]
name = "unknown"
schedule = "@daily"
calendars = ["holiday"]
exclude = ["@weekly", "0 0 * * *"]
command = ["true"]

[[job]]
name = "never"
schedule = "0 12 * * *"
exclude = ["0 12 * * *"]
command = ["true"]
"#,
        );
        let check = env.run(&["check", "--config", bad.to_str().unwrap()]);
        assert_eq!(check.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&check.stderr);
        let path = bad.display();
        let ics = env.dir.join("broken.ics").display().to_string();
        for line in [
            format!("{path}: [calendars.broken]: ics: {ics:?} is not an iCalendar file ("),
            format!("{path}: job \"both\": schedules: is set together with schedule: give schedule = \"…\" for one schedule or schedules = [\"…\", \"…\"] for several, not both\n"),
            format!("{path}: job \"empty\": schedules: is empty: give at least one schedule, such as [\"0 9 * * MON-FRI\", \"0 11 * * SAT\"]\n"),
            format!("{path}: job \"unknown\": exclude: \"@weekly\" is not an exclusion: use a date such as \"2026-12-25\" or a cron expression such as \"0 12 * * *\"\n"),
            format!("{path}: job \"unknown\": calendars: \"holiday\" is not a [calendars.NAME] of this file: define it, or remove it from the list\n"),
            format!("{path}: job \"never\": exclude: can never fire: its exclusions remove every occurrence from now on"),
        ] {
            assert!(stderr.contains(&line), "{line}\nnot in:\n{stderr}");
        }
    })
    .await;
}

/// On a fleet (two producers, consumers, RabbitMQ and Redis) and on a standalone's data
/// file: the history holds only the seconds `exclude` leaves and each instant of a
/// `schedules` union once, and `cronq verify` expects exactly those (no excluded second is
/// expected, none is a gap).
async fn accounted(backend: Backend, env: TestEnv) {
    let script = format!(
        "echo \"$CRONQ_KEY\" >> '{}'/\"$CRONQ_JOB\".ran",
        env.dir.display()
    );
    let toml = format!(
        "{LEADER}\n[handlers.append]\ncommand = {}\n\n[[job]]\nname = \"odd\"\nschedule = \"@every 1s\"\nexclude = [\"*/2 * * * * *\"]\nhandler = \"append\"\noverlap = \"allow\"\ntimeout = \"5s\"\n\n[[job]]\nname = \"union\"\nschedules = [\"*/2 * * * * *\", \"*/3 * * * * *\"]\nhandler = \"append\"\noverlap = \"allow\"\ntimeout = \"5s\"\n",
        argv(&["/bin/sh", "-c", &script])
    );
    let running = Running::start(Deployment::on(backend), &env, &toml).await;
    running
        .until_succeeded("odd", 2, Duration::from_secs(40), "odd to run")
        .await;
    running
        .until_succeeded("union", 2, Duration::from_secs(40), "union to run")
        .await;
    let from = DateTime::from_timestamp(Utc::now().timestamp() + 1, 0).expect("in range");
    tokio::time::sleep(Duration::from_secs(8)).await;
    let to = DateTime::from_timestamp(Utc::now().timestamp(), 0).expect("in range");
    // Every occurrence of the range has had its 5 s timeout.
    tokio::time::sleep(Duration::from_secs(6)).await;

    let seconds = |job: &str| -> Vec<i64> {
        let mut keys: Vec<i64> = std::fs::read_to_string(env.dir.join(format!("{job}.ran")))
            .unwrap_or_default()
            .lines()
            .map(|k| {
                let at = k.strip_prefix(&format!("{job}@")).expect("key of the job");
                DateTime::parse_from_rfc3339(at)
                    .expect("RFC 3339")
                    .timestamp()
            })
            .collect();
        keys.sort_unstable();
        keys
    };
    let logs = running.logs();
    let odd = seconds("odd");
    assert!(
        odd.iter().all(|s| s % 2 == 1),
        "only odd seconds ran: {odd:?}\n{logs}"
    );
    let union = seconds("union");
    let mut unique = union.clone();
    unique.dedup();
    assert_eq!(union, unique, "each instant of the union once\n{logs}");
    assert!(
        union.iter().all(|s| s % 2 == 0 || s % 3 == 0),
        "only the union's seconds: {union:?}\n{logs}"
    );

    let fmt = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Secs, true);
    let (from_arg, to_arg) = (fmt(from), fmt(to));
    let out = running.cli(&[
        "verify", "--from", &from_arg, "--to", &to_arg, "--grace", "0s", "--json",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{logs}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("verify JSON");
    assert_eq!(report["gaps"], 0, "{report}");
    let range = from.timestamp()..=to.timestamp();
    let job = |name: &str| {
        report["jobs"]
            .as_array()
            .expect("jobs")
            .iter()
            .find(|j| j["job"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no job {name} in {report}"))
    };
    let want_odd = range.clone().filter(|s| s % 2 == 1).count();
    assert_eq!(job("odd")["expected"], want_odd, "{report}");
    let want_union = range.filter(|s| s % 2 == 0 || s % 3 == 0).count();
    assert_eq!(job("union")["expected"], want_union, "{report}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_runs_and_accounts_for_only_what_the_time_controls_leave() {
    scoped("controls-real", |env| accounted(Backend::Real, env)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_standalone_on_a_data_file_runs_and_accounts_for_only_what_the_time_controls_leave() {
    scoped("controls-sqlite", |env| accounted(Backend::Sqlite, env)).await;
}
