//! Catch-up after a restart: each job's cursor is in the data file, so a standalone that
//! was stopped and started again publishes the occurrences it missed per the job's
//! `catchup`: `all` each of them (inside `catchup_window`), `latest` only the newest,
//! `none` none; and every occurrence published, before or after, succeeds once.

use std::time::Duration;

use chrono::Utc;

use crate::support::data_file::{DataFile, LEADER, job, keys, seconds};
use crate::support::history::Published;
use crate::support::{TestEnv, scoped};

/// How long the standalone stays down: several ticks of every job, and more than the
/// window of `windowed`.
const OUTAGE: Duration = Duration::from_secs(6);

/// The `catchup_window` of `windowed`, in seconds.
const WINDOW: i64 = 3;

/// A job's TOML lines: `catchup` and `catchup_window`, and `overlap = "allow"`, so that the
/// catch-up burst runs side by side instead of being skipped while one of it runs.
fn policy(catchup: &str, window: &str) -> String {
    format!("catchup = \"{catchup}\"\ncatchup_window = \"{window}\"\noverlap = \"allow\"")
}

/// The seconds of `published` with trigger `trigger`.
fn with_trigger(published: &[Published], trigger: &str) -> Vec<i64> {
    let only: Vec<Published> = published
        .iter()
        .filter(|p| p.trigger == trigger)
        .cloned()
        .collect();
    seconds(&only)
}

/// The seconds from `first` to `last` that `got` lacks, stepping by `every`.
fn missing(got: &[i64], first: i64, last: i64, every: i64) -> Vec<i64> {
    (first..=last)
        .step_by(usize::try_from(every).unwrap())
        .filter(|s| !got.contains(s))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_catches_up_per_each_jobs_policy() {
    scoped("sd-catch-up", |env: TestEnv| async move {
        let toml = [
            LEADER.to_owned(),
            job(&env, "all", "@every 1s", &policy("all", "1h")),
            job(&env, "all2", "@every 2s", &policy("all", "1h")),
            job(&env, "windowed", "@every 1s", &policy("all", &format!("{WINDOW}s"))),
            job(&env, "latest", "@every 1s", &policy("latest", "1h")),
            job(&env, "none", "@every 1s", &policy("none", "1h")),
        ]
        .concat();
        let file = DataFile::new(&env, &toml);
        let first = file.start("standalone-1", &["--lease", "2s"]);
        file.leading(&first).await;
        for (name, n) in [("all", 2), ("all2", 1), ("windowed", 2), ("latest", 2), ("none", 2)] {
            file.scheduled_by(&first, name, n).await;
        }
        file.stop(&first);
        tokio::time::sleep(OUTAGE).await;

        let restarted = Utc::now().timestamp();
        let second = file.start("standalone-2", &["--lease", "2s"]);
        file.leading(&second).await;
        for (name, n) in [("all", 2), ("all2", 1), ("windowed", 2), ("latest", 2), ("none", 2)] {
            file.scheduled_by(&second, name, n).await;
        }
        let logs = file.logs();

        for (name, every) in [("all", 1), ("all2", 2)] {
            let before = seconds(&file.published_by(&first, name));
            let after = file.published_by(&second, name);
            let last = *before.last().unwrap();
            let caught = with_trigger(&after, "Catchup");
            // Every tick between the last one before the stop and the first scheduled one
            // after the restart was published once, as a catch-up.
            let all = seconds(&file.published(name));
            let gaps = missing(&all, all[0], *all.last().unwrap(), every);
            assert!(gaps.is_empty(), "{name}: never published {gaps:?}{logs}");
            assert!(
                caught.len() as i64 >= (OUTAGE.as_secs() as i64 - 2) / every,
                "{name}: only {caught:?} caught up after an outage of {OUTAGE:?} from {last}{logs}"
            );
            assert!(caught.iter().all(|s| *s > last), "{name}: {caught:?}{logs}");
            let dup = all.windows(2).any(|w| w[0] == w[1]);
            assert!(!dup, "{name}: a tick published twice: {all:?}{logs}");
        }

        // `windowed`: only the missed ticks inside its window, then every tick.
        let last = *seconds(&file.published_by(&first, "windowed")).last().unwrap();
        let after = seconds(&file.published_by(&second, "windowed"));
        let caught = with_trigger(&file.published_by(&second, "windowed"), "Catchup");
        assert!(!caught.is_empty(), "windowed: nothing caught up{logs}");
        assert!(
            caught.iter().all(|s| *s >= restarted - WINDOW - 1),
            "windowed: caught up {caught:?}, older than its {WINDOW}s window before {restarted}{logs}"
        );
        assert!(
            after[0] > last + 1,
            "windowed: the ticks right after {last} are outside the window, yet {after:?}{logs}"
        );
        let gaps = missing(&after, after[0], *after.last().unwrap(), 1);
        assert!(gaps.is_empty(), "windowed: {gaps:?} missing after the restart{logs}");

        // `latest`: one catch-up, the newest missed tick, then every tick.
        let last = *seconds(&file.published_by(&first, "latest")).last().unwrap();
        let published = file.published_by(&second, "latest");
        let after = seconds(&published);
        let caught = with_trigger(&published, "Catchup");
        assert_eq!(caught.len(), 1, "latest: caught up {caught:?}{logs}");
        assert_eq!(caught[0], after[0], "latest: the catch-up comes first{logs}");
        assert!(
            caught[0] >= last + OUTAGE.as_secs() as i64 - 1,
            "latest: {} is not the newest tick missed since {last}{logs}",
            caught[0]
        );
        let gaps = missing(&after, after[0], *after.last().unwrap(), 1);
        assert!(gaps.is_empty(), "latest: {gaps:?} missing after the restart{logs}");

        // `none`: nothing from the outage.
        let last = *seconds(&file.published_by(&first, "none")).last().unwrap();
        let published = file.published_by(&second, "none");
        let after = seconds(&published);
        assert!(
            with_trigger(&published, "Catchup").is_empty(),
            "none: {published:?}{logs}"
        );
        assert!(
            after[0] >= restarted && after[0] > last + 1,
            "none: published {after:?} after stopping at {last}, restarting at {restarted}{logs}"
        );

        // Each published occurrence of every job, before or after, succeeded once.
        for name in ["all", "all2", "windowed", "latest", "none"] {
            file.once_each(name, &keys(&file.published(name))).await;
        }
        file.stop(&second);
        file.assert_intact().await;
    })
    .await;
}
