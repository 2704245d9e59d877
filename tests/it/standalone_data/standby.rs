//! Two standalones on one data file: the second waits as a standby and runs nothing while
//! the first lives; when the first is killed, the second takes over within the leader
//! lease and every second is run once: none twice, none missing.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::support::data_file::{DataFile, LEADER, LEADER_LEASE, WAIT, job, keys};
use crate::support::history;
use crate::support::{TestEnv, eventually, scoped};

/// How much later than the leader lease the standby may lead: its retry, its start-up.
const MARGIN: Duration = Duration::from_secs(2);

/// Lines of a JSON log about an occurrence (they carry a `key`).
fn occurrence_lines(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.contains("\"key\":")).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_standalone_stands_by_and_takes_over_when_the_first_dies() {
    scoped("sd-standby", |env: TestEnv| async move {
        let toml = format!(
            "{LEADER}{}",
            job(
                &env,
                "tick",
                "@every 1s",
                "catchup = \"all\"\noverlap = \"allow\""
            )
        );
        let file = DataFile::new(&env, &toml);
        let first = file.start("standalone-1", &["--lease", "2s"]);
        file.leading(&first).await;
        let second = file.start("standalone-2", &["--lease", "2s"]);
        eventually(WAIT, "the second standalone to stand by", || async {
            env.log(&second.log).contains("standby").then_some(())
        })
        .await;
        file.advance("tick", 3).await;
        let log = env.log(&second.log);
        assert!(
            !log.contains("became leader") && occurrence_lines(&log).is_empty(),
            "the standby did something while the first lived:\n{log}"
        );
        let runs = file.runs(Some("tick")).await;
        let consumers: BTreeSet<&str> = runs.iter().map(|r| r.consumer.as_str()).collect();
        assert_eq!(
            consumers.len(),
            1,
            "one process ran them all: {consumers:?}"
        );

        file.kill(&first);
        let took = file.leading(&second).await;
        assert!(
            took < LEADER_LEASE + MARGIN,
            "the standby took over {took:?} after the kill, the leader lease is {LEADER_LEASE:?}{}",
            file.logs()
        );
        file.scheduled_by(&second, "tick", 3).await;
        let published = keys(&file.published("tick"));
        let expected = history::ticks("tick", &published, 1);
        let gaps: Vec<&String> = expected
            .iter()
            .filter(|k| !published.contains(*k))
            .collect();
        assert!(gaps.is_empty(), "never published: {gaps:?}{}", file.logs());
        file.once_each("tick", &expected).await;
        file.stop(&second);
        file.assert_intact().await;
    })
    .await;
}
