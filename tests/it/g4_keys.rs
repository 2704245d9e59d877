//! Fire times are a function of the schedule, zone and instant only (G4), as `cronq next`
//! shows them.
//!
//! `cronq next` through the real binary: the human table, `--json`, `--from` across
//! daylight-saving changes (`docs/config.md`), fewer times when fewer exist, usage errors.

use crate::support::config_dir::{ConfigDir, stderr, stdout};

const NEW_YORK: &str = r#"[defaults]
timezone = "America/New_York"

[[job]]
name = "pinned-0230"
schedule = "30 2 * * *"

[[job]]
name = "pinned-0130"
schedule = "30 1 * * *"

[[job]]
name = "every-15m"
schedule = "*/15 * * * *"
"#;

fn json(out: &std::process::Output) -> serde_json::Value {
    assert_eq!(out.status.code(), Some(0), "{}", stderr(out));
    serde_json::from_slice(&out.stdout).expect("stdout is one JSON document")
}

/// The `utc` and `local` pairs of one job in a `--json` document.
fn times(doc: &serde_json::Value, job: usize) -> Vec<(String, String)> {
    doc["jobs"][job]["next"]
        .as_array()
        .expect("next is an array")
        .iter()
        .map(|t| {
            (
                t["utc"].as_str().expect("utc").to_owned(),
                t["local"].as_str().expect("local").to_owned(),
            )
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(u, l)| ((*u).to_owned(), (*l).to_owned()))
        .collect()
}

#[test]
fn json_document_lists_every_job() {
    let dir = ConfigDir::with("next-json", NEW_YORK);
    let doc = json(&dir.run(&[
        "next",
        "--config",
        "cronq.toml",
        "--from",
        "2026-01-15T12:00:00Z",
        "--count",
        "2",
        "--json",
    ]));
    assert_eq!(doc["from"], "2026-01-15T12:00:00Z");
    let jobs = doc["jobs"].as_array().expect("jobs");
    assert_eq!(jobs.len(), 3);
    assert_eq!(jobs[0]["job"], "pinned-0230");
    assert_eq!(jobs[0]["schedule"], "30 2 * * *");
    assert_eq!(jobs[0]["timezone"], "America/New_York");
    assert_eq!(
        times(&doc, 0),
        pairs(&[
            ("2026-01-16T07:30:00Z", "2026-01-16T02:30:00-05:00"),
            ("2026-01-17T07:30:00Z", "2026-01-17T02:30:00-05:00"),
        ])
    );
    assert_eq!(
        times(&doc, 2),
        pairs(&[
            ("2026-01-15T12:15:00Z", "2026-01-15T07:15:00-05:00"),
            ("2026-01-15T12:30:00Z", "2026-01-15T07:30:00-05:00"),
        ])
    );
}

#[test]
fn spring_forward_in_new_york() {
    let dir = ConfigDir::with("next-spring", NEW_YORK);
    let run = |job: &str, count: &str| {
        json(&dir.run(&[
            "next",
            "--config",
            "cronq.toml",
            "--job",
            job,
            "--from",
            "2026-03-08T05:00:00Z", // 00:00 EST, the day clocks jump 02:00 -> 03:00
            "--count",
            count,
            "--json",
        ]))
    };
    // 02:30 does not exist: it runs once, at the first instant after the gap.
    assert_eq!(
        times(&run("pinned-0230", "2"), 0),
        pairs(&[
            ("2026-03-08T07:00:00Z", "2026-03-08T03:00:00-04:00"),
            ("2026-03-09T06:30:00Z", "2026-03-09T02:30:00-04:00"),
        ])
    );
    // By elapsed time: nothing inside the skipped hour.
    let doc = run("every-15m", "9");
    let locals: Vec<String> = times(&doc, 0).into_iter().map(|(_, l)| l).collect();
    assert_eq!(
        locals[5..],
        [
            "2026-03-08T01:30:00-05:00",
            "2026-03-08T01:45:00-05:00",
            "2026-03-08T03:00:00-04:00",
            "2026-03-08T03:15:00-04:00",
        ]
    );
}

#[test]
fn fall_back_in_new_york() {
    let dir = ConfigDir::with("next-fall", NEW_YORK);
    let run = |job: &str, from: &str, count: &str| {
        json(&dir.run(&[
            "next",
            "--config",
            "cronq.toml",
            "--job",
            job,
            "--from",
            from,
            "--count",
            count,
            "--json",
        ]))
    };
    // 01:30 occurs twice: it runs once, at the first pass (EDT).
    assert_eq!(
        times(&run("pinned-0130", "2026-11-01T04:00:00Z", "2"), 0),
        pairs(&[
            ("2026-11-01T05:30:00Z", "2026-11-01T01:30:00-04:00"),
            ("2026-11-02T06:30:00Z", "2026-11-02T01:30:00-05:00"),
        ])
    );
    // By elapsed time: through both passes of the repeated hour.
    assert_eq!(
        times(&run("every-15m", "2026-11-01T05:30:00Z", "4"), 0),
        pairs(&[
            ("2026-11-01T05:45:00Z", "2026-11-01T01:45:00-04:00"),
            ("2026-11-01T06:00:00Z", "2026-11-01T01:00:00-05:00"),
            ("2026-11-01T06:15:00Z", "2026-11-01T01:15:00-05:00"),
            ("2026-11-01T06:30:00Z", "2026-11-01T01:30:00-05:00"),
        ])
    );
}

#[test]
fn human_table_shows_local_and_utc() {
    let dir = ConfigDir::with("next-table", NEW_YORK);
    let out = dir.run(&[
        "next",
        "--config",
        "cronq.toml",
        "--job",
        "pinned-0230",
        "--from",
        "2026-03-08T00:00:00-05:00",
        "--count",
        "2",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "pinned-0230 (\"30 2 * * *\" in America/New_York)
  2026-03-08 03:00:00 -04:00 EDT  2026-03-08T07:00:00Z
  2026-03-09 02:30:00 -04:00 EDT  2026-03-09T06:30:00Z
"
    );
}

#[test]
fn fewer_times_when_fewer_exist() {
    let dir = ConfigDir::with(
        "next-fewer",
        "[[job]]\nname = \"once\"\nschedule = \"0 0 12 1 1 * 2099\"\n",
    );
    let doc = json(&dir.run(&[
        "next",
        "--config",
        "cronq.toml",
        "--from",
        "2026-01-01T00:00:00Z",
        "--count",
        "3",
        "--json",
    ]));
    assert_eq!(
        times(&doc, 0),
        pairs(&[("2099-01-01T12:00:00Z", "2099-01-01T12:00:00+00:00")])
    );
    let out = dir.run(&[
        "next",
        "--config",
        "cronq.toml",
        "--from",
        "2026-01-01T00:00:00Z",
        "--count",
        "3",
    ]);
    assert_eq!(
        stdout(&out),
        "once (\"0 0 12 1 1 * 2099\" in UTC)
  2099-01-01 12:00:00 +00:00 UTC  2099-01-01T12:00:00Z
  (no further fire times)
"
    );
}

#[test]
fn unknown_job_is_a_usage_error_with_a_suggestion() {
    let dir = ConfigDir::with("next-unknown", NEW_YORK);
    let out = dir.run(&["next", "--config", "cronq.toml", "--job", "every-15"]);
    assert_eq!(
        stderr(&out),
        "cronq: --job: no job \"every-15\" in cronq.toml; did you mean \"every-15m\"?\n"
    );
    assert_eq!(out.status.code(), Some(2));
    let out = dir.run(&["next", "--config", "cronq.toml", "--job", "zzz"]);
    assert_eq!(
        stderr(&out),
        "cronq: --job: no job \"zzz\" in cronq.toml; its jobs are pinned-0230, pinned-0130, every-15m\n"
    );
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn bad_from_and_count_are_usage_errors() {
    let dir = ConfigDir::with("next-from", NEW_YORK);
    let out = dir.run(&[
        "next",
        "--config",
        "cronq.toml",
        "--from",
        "2026-03-08 05:00",
    ]);
    assert_eq!(
        stderr(&out),
        "cronq: --from \"2026-03-08 05:00\" is not an RFC 3339 instant such as 2026-03-08T06:00:00Z: premature end of input\n"
    );
    assert_eq!(out.status.code(), Some(2));
    let out = dir.run(&["next", "--config", "cronq.toml", "--count", "0"]);
    assert_eq!(stderr(&out), "cronq: --count must be at least 1\n");
    assert_eq!(out.status.code(), Some(2));
}

/// `H` through the real binary: each job's own minute and hour, derived from its name, the
/// same in every process (pinned literals: a change of the hash fails here).
#[test]
fn hashed_schedules_resolve_per_job_name() {
    let text = "[[job]]\nname = \"backup\"\nschedule = \"H H * * *\"\n\n[[job]]\nname = \"report\"\nschedule = \"H(0-29)/10 * * * *\"\n";
    let dir = ConfigDir::with("next-hash", text);
    let check = dir.run(&["check", "--config", "cronq.toml"]);
    assert_eq!(check.status.code(), Some(0), "{}", stderr(&check));
    let args = [
        "next",
        "--config",
        "cronq.toml",
        "--from",
        "2026-01-15T12:00:00Z",
        "--count",
        "3",
        "--json",
    ];
    let doc = json(&dir.run(&args));
    assert_eq!(doc["jobs"][0]["schedule"], "H H * * *");
    assert_eq!(doc["jobs"][0]["resolved"], "12 20 * * *");
    assert_eq!(
        times(&doc, 0),
        pairs(&[
            ("2026-01-15T20:12:00Z", "2026-01-15T20:12:00+00:00"),
            ("2026-01-16T20:12:00Z", "2026-01-16T20:12:00+00:00"),
            ("2026-01-17T20:12:00Z", "2026-01-17T20:12:00+00:00"),
        ])
    );
    assert_eq!(doc["jobs"][1]["resolved"], "5-29/10 * * * *");
    assert_eq!(
        times(&doc, 1),
        pairs(&[
            ("2026-01-15T12:05:00Z", "2026-01-15T12:05:00+00:00"),
            ("2026-01-15T12:15:00Z", "2026-01-15T12:15:00+00:00"),
            ("2026-01-15T12:25:00Z", "2026-01-15T12:25:00+00:00"),
        ])
    );
    assert_eq!(json(&dir.run(&args)), doc, "the same in another process");
    let bad = ConfigDir::with(
        "next-hash-bad",
        "[[job]]\nname = \"b\"\nschedule = \"0 0 * * * * H\"\n",
    );
    let out = bad.run(&["check", "--config", "cronq.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains(
            "cronq.toml: job \"b\": schedule: \"0 0 * * * * H\" is not a cron expression: year \"H\": H is not allowed in the year field"
        ),
        "{}",
        stderr(&out)
    );
}
