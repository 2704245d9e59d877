//! Property tests: no input makes the loader panic, whatever the text or the field values.

use std::path::Path;

use proptest::prelude::*;

use super::Config;

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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

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
}
