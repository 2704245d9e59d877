//! Another process holding the data file's write lock (a stuck `sqlite3` shell, a backup
//! tool) while an attempt runs: its renewals wait for the lock, as every write of the
//! standalone does. Held past the attempt's lease, the handler is stopped when the lease
//! runs out by the standalone's own clock, not once the lock is gone and the renewal is
//! answered; the occurrence then runs again, once (G1, G3). Held for less than the lease,
//! the attempt is kept and runs once.

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::Utc;
use cronq_shared::runlog::Outcome;

use crate::support::data_file::{DataFile, job_running};
use crate::support::history::{self, Mark, Trace, traced_script};
use crate::support::{TestEnv, eventually, scoped};

/// The attempt's execution lease (`--lease`): renewed every 667 ms.
const LEASE: &str = "2s";

/// A leader lease well past the lock's hold, so that the standalone stays the leader
/// while its writes wait (the test is about the attempt's lease, not the leader's).
const LEADER: &str = "[leader]\nlease = \"20s\"\nrenew_deadline = \"15s\"\nretry = \"300ms\"\n";

/// The standalone's config: `slow`, whose first start runs 5 s and a later one ends at
/// once, traced in `trace`.
fn config(trace: &Path) -> String {
    let secs = format!(
        "$([ $(grep -c '^start' '{}') -gt 1 ] && echo 0 || echo 5)",
        trace.display()
    );
    format!(
        "{LEADER}{}",
        job_running("slow", "0 0 1 1 *", "", &traced_script(trace, &secs))
    )
}

/// Holds the write lock of the data file at `path` (`BEGIN IMMEDIATE`, as `sqlite3` does
/// for a write) for `hold`, from another connection, as another process would; returns
/// when it was taken (unix ms), once it is released.
async fn lock_for(path: &Path, hold: Duration) -> i64 {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        let conn = rusqlite::Connection::open(&path).expect("open the data file");
        conn.busy_timeout(Duration::from_secs(10))
            .expect("a busy timeout");
        conn.execute_batch("BEGIN IMMEDIATE")
            .expect("the data file's write lock");
        let taken = Utc::now().timestamp_millis();
        std::thread::sleep(hold);
        conn.execute_batch("COMMIT").expect("release the lock");
        taken
    })
    .await
    .expect("the locking thread")
}

/// The test's data file with [`config`], a standalone started on it, and `slow`
/// triggered: the file, its trace and the occurrence's key, once its command has run for a
/// second (past its first renewal).
async fn running(env: &TestEnv) -> (DataFile, PathBuf, String) {
    let trace = env.dir.join("trace");
    let file = DataFile::new(env, &config(&trace));
    let standalone = file.start("standalone", &["--lease", LEASE]);
    file.leading(&standalone).await;
    let key = file.ok(&["trigger", "slow"]).trim().to_owned();
    eventually(Duration::from_secs(10), "the attempt to start", || async {
        Trace::read(&trace).first(Mark::Start, &key)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    (file, trace, key)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_data_file_locked_past_the_lease_stops_the_handler_when_the_lease_runs_out() {
    scoped("sd-locked-long", |env: TestEnv| async move {
        let (file, trace, key) = running(&env).await;
        // 3.5 s: past the lease, within the file's busy timeout (5 s), so that the renewal
        // waiting for the lock is answered once it is released.
        let locked = lock_for(&file.path, Duration::from_millis(3500)).await;
        let t = Trace::read(&trace);
        let term = t.first(Mark::Term, &key).unwrap_or_else(|| {
            panic!(
                "the handler was not stopped while the file was locked:\n{}{}",
                t.render(),
                file.logs()
            )
        });
        // The last renewal answered was sent at most a heartbeat before the lock, so the
        // lease ran out 1.33 to 2 s after it; a stop when the renewal is answered comes
        // 3.5 s after it.
        let after = term - locked;
        assert!(
            (1000..=2600).contains(&after),
            "the handler was stopped {after} ms after the lock, not when its lease ran out:\n{}{}",
            t.render(),
            file.logs()
        );
        eprintln!("the handler was stopped {after} ms after the lock");
        let runs = file.once_each("slow", std::slice::from_ref(&key)).await;
        let outcomes: Vec<Outcome> = runs.iter().rev().map(|r| r.outcome).collect();
        assert_eq!(
            outcomes,
            [Outcome::Lost, Outcome::Succeeded],
            "runs:\n{}",
            history::render_runs(&runs)
        );
        assert_eq!(Trace::read(&trace).count(Mark::Start, &key), 2);
        file.assert_intact().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_data_file_locked_for_less_than_the_lease_keeps_the_attempt() {
    scoped("sd-locked-short", |env: TestEnv| async move {
        let (file, trace, key) = running(&env).await;
        // 0.8 s: the renewal waiting for the lock is answered once it is released, within
        // the lease (which ran until 1.33 to 2 s after the lock).
        lock_for(&file.path, Duration::from_millis(800)).await;
        let runs = file.once_each("slow", std::slice::from_ref(&key)).await;
        // Time for the reaper to hand the occurrence out again, were its lease left to lapse.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let t = Trace::read(&trace);
        assert_eq!(
            (t.count(Mark::Start, &key), t.count(Mark::Term, &key)),
            (1, 0),
            "{}runs:\n{}{}",
            t.render(),
            history::render_runs(&runs),
            file.logs()
        );
        assert_eq!(file.runs(Some("slow")).await.len(), 1);
    })
    .await;
}
