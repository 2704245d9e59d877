//! Time controls through a real standalone: `start_at` and `end_at` bound what runs.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};

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
