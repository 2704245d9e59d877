//! The data file's disk filling up while the standalone runs (G3, a store outage): every
//! refused write is logged, naming the file, and retried; nothing panics; once there is
//! room again, every occurrence scheduled meanwhile runs once (none lost, none twice) and
//! the file is intact.

use std::io::Write as _;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};

use crate::support::data_file::{DataFile, LEADER, job, seconds};
use crate::support::tmpfs::Tmpfs;
use crate::support::{TestEnv, scoped, until};

/// How long the disk stays full: longer than the leader's `renew_deadline`, so the leader
/// steps down and the occurrences of the outage come back as catch-up.
const FULL_FOR: Duration = Duration::from_secs(4);

/// The key of `job`'s occurrence at Unix second `second`.
fn key(job: &str, second: i64) -> String {
    let at = DateTime::<Utc>::from_timestamp(second, 0).expect("a second in range");
    format!("{job}@{}", at.to_rfc3339_opts(SecondsFormat::Secs, true))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_disk_that_fills_up_while_running_loses_no_occurrence() {
    scoped("sd-disk-full", |env: TestEnv| async move {
        // Room for the start check (8 MiB free) and the first seconds of work.
        let Some(disk) = Tmpfs::mount(&env.dir.join("disk"), "size=10m") else {
            return;
        };
        let extra = "catchup = \"all\"\ncatchup_window = \"5m\"\noverlap = \"allow\"";
        let toml = format!("{LEADER}{}", job(&env, "tick", "@every 1s", extra));
        let file = DataFile::at(&env, &toml, disk.dir.join("cronq.db"));
        let standalone = file.start("standalone", &["--lease", "3s"]);
        file.leading(&standalone).await;
        file.scheduled_by(&standalone, "tick", 2).await;
        let first = seconds(&file.published("tick"))[0];

        // Fill the disk to the last block.
        let mut filler = std::fs::File::create(disk.dir.join("filler")).unwrap();
        let block = [0u8; 4096];
        while filler.write_all(&block).is_ok() {}
        let _ = filler.sync_all();
        let refusal = until(
            Duration::from_secs(10),
            "a write refused for want of space, logged with the data file",
            || async {
                let log = env.log(&standalone.log);
                let path = file.arg();
                match log
                    .lines()
                    .find(|l| l.contains("disk is full") && l.contains(&path))
                {
                    Some(line) => Ok(line.to_owned()),
                    None => Err(file.logs()),
                }
            },
        )
        .await;
        tokio::time::sleep(FULL_FOR).await;
        drop(filler);
        std::fs::remove_file(disk.dir.join("filler")).unwrap();
        let freed = Utc::now().timestamp();

        // Still running: it retried, it did not give up or panic.
        let log = env.log(&standalone.log);
        assert!(
            env.wait(standalone.pid, Duration::ZERO).is_none(),
            "the standalone exited on a full disk:{}",
            file.logs()
        );
        assert!(!log.contains("panicked"), "a panic:{}", file.logs());
        assert!(
            refusal.contains("SQLite data file operation failed"),
            "the refusal says what failed: {refusal}"
        );

        // Every second from the first tick to a few after the disk was freed ran once.
        let last = freed + 3;
        until(
            Duration::from_secs(20),
            "the tick of a few seconds after the disk was freed to be published",
            || async {
                let published = seconds(&file.published("tick"));
                if published.last().is_some_and(|s| *s >= last) {
                    Ok(())
                } else {
                    Err(file.logs())
                }
            },
        )
        .await;
        let keys: Vec<String> = (first..=last).map(|s| key("tick", s)).collect();
        file.once_each("tick", &keys).await;
        file.stop(&standalone);
        file.assert_intact().await;
        drop(disk);
    })
    .await;
}
