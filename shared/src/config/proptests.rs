//! Property tests: no input makes the loader panic, whatever the text or the field values;
//! and the loader's fast path reads every file it takes as the careful path does.

use std::path::Path;

use chrono::{DateTime, Utc};
use proptest::prelude::*;

use super::Config;
use super::load::{careful, fast};
use super::quick;
use super::raw::RawConfig;

const FIELDS: &[&str] = &[
    "name",
    "schedule",
    "timezone",
    "timeout",
    "overlap",
    "catchup",
    "catchup_window",
    "deadline",
    "max_attempts",
    "backoff",
    "backoff_max",
    "jitter",
    "queue",
    "retention",
    "max_concurrent",
    "pool",
    "payload",
    "command",
    "http",
    "lease",
    "renew_deadline",
    "retry",
    "nmae",
];

/// Strings that are close to what the fields accept, plus arbitrary ones.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("@every 1s".to_owned()),
        Just("@every 0s".to_owned()),
        Just("@every".to_owned()),
        Just("0 61 * * *".to_owned()),
        Just("0 0 30 2 *".to_owned()),
        Just("30 2 * * *".to_owned()),
        Just("* * * * * * 1999".to_owned()),
        Just("none".to_owned()),
        Just("0s".to_owned()),
        Just("18446744073709551615s".to_owned()),
        Just("America/New_York".to_owned()),
        Just("local".to_owned()),
        Just("https://user:pw@h/".to_owned()),
        "[a-z0-9 @*/,#LW?-]{0,24}",
        "\\PC{0,16}",
    ]
}

fn value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        text().prop_map(|s| format!("{s:?}")),
        any::<i64>().prop_map(|i| i.to_string()),
        any::<bool>().prop_map(|b| b.to_string()),
        Just("nan".to_owned()),
        Just("-inf".to_owned()),
        Just("1.5".to_owned()),
        Just("1979-05-27T07:32:00Z".to_owned()),
    ];
    leaf.prop_recursive(2, 8, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(", "))),
            prop::collection::vec(
                (
                    prop::sample::select(vec!["url", "method", "headers", "x", "a b"]),
                    inner
                ),
                0..4
            )
            .prop_map(|kv| {
                let body: Vec<String> = kv.iter().map(|(k, v)| format!("{k:?} = {v}")).collect();
                format!("{{ {} }}", body.join(", "))
            }),
        ]
    })
}

fn section() -> impl Strategy<Value = String> {
    let header = prop::sample::select(vec![
        "[defaults]",
        "[leader]",
        "[[job]]",
        "[[job]]",
        "[job]",
        "[other]",
    ]);
    let fields = prop::collection::vec((prop::sample::select(FIELDS.to_vec()), value()), 0..8);
    (header, fields).prop_map(|(header, fields)| {
        let mut out = format!("{header}\n");
        let mut seen = std::collections::HashSet::new();
        for (k, v) in fields {
            // Duplicate keys are a syntax error; keep most documents past the parser.
            if seen.insert(k) {
                out.push_str(&format!("{k} = {v}\n"));
            }
        }
        out
    })
}

/// The fields a `[[job]]` may have (a job's own and those of `[defaults]`), and one it may
/// not.
const JOB_KEYS: &[&str] = &[
    "name",
    "schedule",
    "schedules",
    "at",
    "exclude",
    "calendars",
    "pool",
    "payload",
    "handler",
    "command",
    "http",
    "user",
    "group",
    "env",
    "clear_env",
    "cwd",
    "start_at",
    "end_at",
    "after",
    "timezone",
    "timeout",
    "overlap",
    "catchup",
    "catchup_window",
    "deadline",
    "max_attempts",
    "backoff",
    "backoff_max",
    "jitter",
    "queue",
    "retention",
    "max_concurrent",
    "sla",
    "colour",
];

/// Values as TOML text that `field` accepts or nearly does: its type, its usual mistakes,
/// and the date-times the two paths must read alike.
fn usual(field: &str) -> &'static [&'static str] {
    match field {
        "name" => &["\"a\"", "\"b\"", "\"c\"", "\"x y\"", "'d'"],
        "schedule" => &[
            "\"@every 1m\"",
            "\"30 2 * * *\"",
            "\"0 61 * * *\"",
            "\"@daily\"",
            "\"0 0 30 2 *\"",
        ],
        "schedules" => &["[\"@daily\", \"0 12 * * *\"]", "[]", "[\"@hourly\", 1]"],
        "at" | "start_at" | "end_at" => &[
            "2026-12-24T10:00:00+01:00",
            "2026-12-24T10:00:00",
            "2026-12-24",
            "\"2026-12-31T18:00:00\"",
            "2025-01-01T00:00:00Z",
        ],
        "exclude" => &[
            "[2026-12-25, \"0 12 * * *\"]",
            "[\"2026-12-26\"]",
            "[2026-12-24T10:00:00]",
        ],
        "calendars" => &["[\"h\"]", "[\"nope\"]"],
        "pool" => &["\"p\"", "\"nope\""],
        "payload" => &[
            "{ region = \"cn\", n = [1, 2] }",
            "{ at = 1979-05-27T07:32:00Z, deep = [{ d = 1979-05-27 }] }",
            "{}",
        ],
        "handler" => &["\"h\"", "\"registered\""],
        "command" => &["[\"true\"]", "[\"/bin/report\", \"--daily\"]", "[]"],
        "http" => &[
            "{ url = \"http://127.0.0.1:8080/\" }",
            "{ url = 1979-05-27T07:32:00Z, headers = { X = 07:32:00 } }",
            "{ url = { env = \"URL\" }, method = \"GET\", headers = { X-Token = \"t\" } }",
            "{ url = \"http://h/\", methd = \"GET\" }",
        ],
        "user" | "group" => &["\"report\"", "\"1001\""],
        "env" => &["{ LANG = \"C.UTF-8\" }", "{ A = 1 }"],
        "clear_env" => &["true", "false"],
        "cwd" => &["\"/srv\"", "\"relative\""],
        "after" => &["[\"a\"]", "[\"b\", \"c\"]", "[\"nope\"]"],
        "timezone" => &["\"Europe/Berlin\"", "\"America/New_York\"", "\"Mars/Base\""],
        "overlap" => &["\"allow\"", "\"queue\"", "\"sometimes\""],
        "catchup" => &["\"none\"", "\"all\"", "\"some\""],
        "deadline" => &["\"none\"", "\"5m\""],
        "max_attempts" | "max_concurrent" => &["3", "0", "1.5", "\"3\""],
        "queue" => &["\"default\"", "\"reports\"", "\"no spaces\""],
        "sla" => &[
            "{ start_within = \"30s\" }",
            "{ max_duration = \"10m\", success_within = \"25h\" }",
            "{ start_within = 1979-05-27T07:32:00Z }",
        ],
        "timeout" | "catchup_window" | "backoff" | "backoff_max" | "jitter" | "retention" => {
            &["\"5m\"", "\"0s\"", "\"1d\"", "\"forever\""]
        }
        _ => &["1"],
    }
}

/// A `key = value` line of a job: mostly a usual value of its field, sometimes any value.
fn job_line() -> impl Strategy<Value = (&'static str, String)> {
    (
        prop::sample::select(JOB_KEYS.to_vec()),
        any::<prop::sample::Index>(),
        prop::option::weighted(0.15, value()),
    )
        .prop_map(|(key, pick, any)| {
            let value = any.unwrap_or_else(|| {
                let usual = usual(key);
                usual[pick.index(usual.len())].to_owned()
            });
            (key, value)
        })
}

/// One `[[job]]` piece: its lines (a key twice now and then, which no piece parses alone),
/// and sometimes a `[job.http]` or `[job.payload]` sub-table.
fn job_piece() -> impl Strategy<Value = String> {
    let sub = prop::sample::select(vec![
        "",
        "",
        "[job.http]\nurl = \"http://127.0.0.1:8080/\"\nmethod = \"POST\"\n",
        "[job.http]\nurl = 3\n",
        "[job.payload]\nat = 2026-01-01T00:00:00Z\nlist = [\n  1,\n]\n",
    ]);
    (
        prop::collection::vec(job_line(), 0..8),
        prop::bool::weighted(0.05),
        sub,
    )
        .prop_map(|(lines, twice, sub)| {
            let mut out = "[[job]]\n".to_owned();
            let mut seen = std::collections::HashSet::new();
            for (key, value) in lines {
                if seen.insert(key) || twice {
                    out.push_str(&format!("{key} = {value}\n"));
                }
            }
            out.push_str(sub);
            out
        })
}

/// The fields a valid job may set to the first of their [`usual`] values, in any
/// combination.
const TIDY_KEYS: &[&str] = &[
    "payload",
    "command",
    "env",
    "clear_env",
    "cwd",
    "timezone",
    "timeout",
    "overlap",
    "catchup",
    "deadline",
    "max_attempts",
    "queue",
    "sla",
];

/// A valid `[[job]]` piece, named `{NAME}` (each is given its own name in the file).
fn tidy_job() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec!["@every 1m", "30 2 * * *", "@daily", "0 9 * * MON"]),
        prop::sample::subsequence(TIDY_KEYS.to_vec(), 0..=TIDY_KEYS.len()),
    )
        .prop_map(|(schedule, keys)| {
            let mut out = format!("[[job]]\nname = \"{{NAME}}\"\nschedule = \"{schedule}\"\n");
            for key in keys {
                out.push_str(&format!("{key} = {}\n", usual(key)[0]));
            }
            out
        })
}

/// A file laid out the usual way, which the fast path takes: head sections, then jobs,
/// valid ones among them.
fn usual_file() -> impl Strategy<Value = String> {
    let head = prop::sample::subsequence(
        vec![
            "[defaults]\ntimezone = \"Europe/Berlin\"\ntimeout = \"10m\"\n",
            "[defaults]\nmax_attempts = \"3\"\ncolour = 1\n",
            "[leader]\nlease = \"20s\"\n",
            "[handlers.h]\ncommand = [\"true\"]\n",
            "[calendars.h]\ndates = [\"2026-12-25\"]\n",
            "[pools.p]\nsize = 2\n",
        ],
        0..=4,
    );
    let job = prop_oneof![job_piece(), tidy_job(), tidy_job()];
    (head, prop::collection::vec(job, 1..6)).prop_map(|(head, jobs)| {
        let jobs: String = (0..)
            .zip(jobs)
            .map(|(i, job)| job.replace("{NAME}", &format!("j{i}")))
            .collect();
        format!("{}\n{jobs}", head.concat())
    })
}

fn now() -> DateTime<Utc> {
    "2026-01-15T00:00:00Z".parse().expect("an instant")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever a file laid out the usual way holds, the fast path (when a piece does not
    /// send it back to the whole text) gives the careful path's config, or its problems
    /// and warnings, in the same order; and so the loader does.
    #[test]
    fn the_fast_path_reads_as_the_careful_path(text in usual_file()) {
        let path = Path::new("f.toml");
        let whole = format!("{:?}", careful(&text, path, now()));
        if let Some(pieces) = fast(&text, path, now()) {
            prop_assert_eq!(&format!("{pieces:?}"), &whole, "{}", text);
        }
        let loaded = Config::from_toml_at(&text, path, now());
        prop_assert_eq!(&format!("{loaded:?}"), &whole, "{}", text);
    }

    /// A piece the fast read takes is read as the careful path reads the same text: the
    /// same raw job, and no problem.
    #[test]
    fn a_quick_read_is_the_careful_read(piece in job_piece()) {
        if let Some(read) = quick::read(&piece, 1) {
            let mut careful = RawConfig::parse_whole(&piece).jobs.into_sections();
            let first = careful.next().expect("one job");
            prop_assert!(careful.next().is_none());
            prop_assert!(first.problems.is_empty(), "{:?}", first.problems);
            prop_assert_eq!(format!("{read:?}"), format!("{:?}", first.value), "{}", piece);
        }
    }

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
        let _ = Config::from_toml(&text, Path::new("f.toml"));
    }

    #[test]
    fn toml_shaped_text_never_panics(sections in prop::collection::vec(section(), 0..5)) {
        let text = sections.concat();
        match Config::from_toml(&text, Path::new("f.toml")) {
            Ok(config) => {
                for job in &config.jobs {
                    prop_assert!(job.max_attempts >= 1);
                    prop_assert!(job.backoff <= job.backoff_max);
                }
                prop_assert!(config.leader.lease > config.leader.renew_deadline);
                prop_assert!(config.leader.renew_deadline > config.leader.retry);
            }
            Err(err) => {
                // Every problem is one line naming the file.
                for line in err.to_string().lines().skip(1) {
                    prop_assert!(line.starts_with("f.toml: "), "{}", line);
                }
            }
        }
    }

    /// Matching from both ends, then by name in between, finds each job where a lookup
    /// of every name finds it: whatever was added, removed or moved.
    #[test]
    fn positions_in_are_where_each_name_is(
        old in prop::sample::subsequence((0..24).collect::<Vec<u8>>(), 0..24).prop_shuffle(),
        edits in prop::collection::vec((0..3u8, 0..24usize, 0..40u8), 0..4),
        moved in any::<bool>(),
    ) {
        // The new list: the old one with a few jobs removed, added or (one) moved.
        let mut new = old.clone();
        for (kind, at, name) in edits {
            let at = at.min(new.len());
            match kind {
                0 if at < new.len() => { new.remove(at); }
                _ if !new.contains(&name) => new.insert(at, name),
                _ => {}
            }
        }
        if moved && new.len() > 1 {
            let job = new.remove(0);
            new.push(job);
        }
        let config = |names: &[u8]| {
            let text: String = names
                .iter()
                .map(|n| format!("[[job]]\nname = \"j{n}\"\nschedule = \"@every 1s\"\n"))
                .collect();
            Config::from_toml(&text, Path::new("f.toml")).expect("valid")
        };
        let (before, after) = (config(&old), config(&new));
        let looked_up: Vec<Option<u32>> = old
            .iter()
            .map(|n| new.iter().position(|m| m == n).map(|i| i as u32))
            .collect();
        prop_assert_eq!(before.positions_in(&after), looked_up);
        let retired: Vec<String> = old
            .iter()
            .filter(|n| !new.contains(n))
            .map(|n| format!("j{n}"))
            .collect();
        let named: Vec<String> = before.retired(&after).iter().map(|n| n.as_str().to_owned()).collect();
        prop_assert_eq!(named, retired);
    }
}
