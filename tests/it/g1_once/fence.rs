//! Fencing tokens through real processes: a consumer frozen (SIGSTOP, with its command's
//! process group, as a stalled host would be) mid-run past its execution lease; another
//! consumer runs the occurrence again with a greater fence and writes its result; the
//! frozen attempt, thawed (SIGCONT), tries its late write and the table that keeps the
//! highest fence seen refuses it (the pattern of docs/consumer.md "Fencing tokens", on
//! SQLite through python3's sqlite3 module).

use std::path::Path;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::support::consumer_process::{
    WAIT, assert_taken_over, consumer_args, publish, runs, started,
};
use crate::support::occurrences::occurrence;
use crate::support::{eventually, scoped};

/// The handler: notes `start FENCE PID`, works for 3 s, then writes its result under its
/// fence (`UPDATE ... WHERE fence < new`) and notes `write FENCE applied|refused`.
const SCRIPT: &str = r#"
import os, sqlite3, sys, time
db, log = sys.argv[1], sys.argv[2]
fence = int(os.environ["CRONQ_FENCE"])
def note(line):
    with open(log, "a") as f:
        f.write(line + "\n")
note(f"start {fence} {os.getpid()}")
time.sleep(3)
conn = sqlite3.connect(db, timeout=10)
conn.execute("CREATE TABLE IF NOT EXISTS report (name TEXT PRIMARY KEY, fence INTEGER NOT NULL, body TEXT)")
conn.execute("INSERT OR IGNORE INTO report (name, fence, body) VALUES ('daily', 0, '')")
cur = conn.execute(
    "UPDATE report SET fence = ?, body = ? WHERE name = 'daily' AND fence < ?",
    (fence, f"written under fence {fence}", fence),
)
conn.commit()
note(f"write {fence} {'applied' if cur.rowcount == 1 else 'refused'}")
"#;

/// The `(word, fence, rest)` of each line of the handler's notes.
fn notes(log: &Path) -> Vec<(String, u64, String)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, ' ');
            Some((
                f.next()?.to_owned(),
                f.next()?.parse().ok()?,
                f.next().unwrap_or_default().to_owned(),
            ))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_attempt_past_its_lease_is_fenced_out_of_a_late_write() {
    scoped("fence_frozen", |env| async move {
        env.track_queue("default");
        let (script, db, log) = (
            env.dir.join("fenced.py"),
            env.dir.join("report.db"),
            env.dir.join("notes"),
        );
        std::fs::write(&script, SCRIPT).unwrap();
        let config = env.write_config(
            "cronq.toml",
            &format!(
                r#"
[[job]]
name = "fenced"
schedule = "0 0 1 1 *"
max_attempts = 1
timeout = "1m"
command = ["python3", "{}", "{}", "{}"]

[[job]]
name = "filler"
schedule = "0 0 1 1 *"
command = ["true"]
"#,
                script.display(),
                db.display(),
                log.display()
            ),
        );
        let config = config.to_str().unwrap();
        // One at a time, so that the filler below keeps its one prefetch slot taken.
        let mut args = consumer_args(config, "a", "2s");
        args.extend(["--concurrency", "1"]);
        let a = env.spawn("a", &args);
        started(&env, "a").await;
        publish(&env, occurrence("fenced", 1)).await;
        let (first, pid) = eventually(WAIT, "consumer a to start the job", || async {
            notes(&log)
                .into_iter()
                .find(|(w, _, _)| w == "start")
                .map(|(_, fence, pid)| (fence, pid.parse::<i32>().unwrap()))
        })
        .await;
        // Delivered to a and held unacked while its one attempt runs: the republished
        // occurrence then goes to b, not to the frozen a.
        publish(&env, occurrence("filler", 1)).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        env.signal(a, Signal::SIGSTOP);
        let group = Pid::from_raw(-pid);
        kill(group, Signal::SIGSTOP).unwrap();
        env.spawn("b", &consumer_args(config, "b", "2s"));
        let second = eventually(WAIT, "consumer b to run it again and write", || async {
            notes(&log)
                .into_iter()
                .find(|(w, _, r)| w == "write" && r == "applied")
                .map(|(_, fence, _)| fence)
        })
        .await;
        assert!(second > first, "the re-run's fence {second} after {first}");
        // Thaw the frozen attempt: its late write is refused.
        kill(group, Signal::SIGCONT).unwrap();
        eventually(WAIT, "the frozen attempt's late write", || async {
            notes(&log)
                .into_iter()
                .find(|(w, fence, _)| w == "write" && *fence == first)
                .map(|(_, _, r)| assert_eq!(r, "refused", "{:?}", notes(&log)))
        })
        .await;
        eprintln!("frozen attempt's fence {first}, the re-run's {second}: the late write refused");
        env.signal(a, Signal::SIGCONT);
        let out = std::process::Command::new("sqlite3")
            .arg(&db)
            .arg("SELECT fence, body FROM report WHERE name = 'daily'")
            .output();
        if let Ok(out) = out {
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                format!("{second}|written under fence {second}")
            );
        }
        let done = eventually(WAIT, "a's attempt to end, fenced", || async {
            let r = runs(&env, "fenced").await;
            r.iter().any(|r| r.consumer == "a").then_some(r)
        })
        .await;
        assert_taken_over(&done, "a", "b", &env.log("a"));
    })
    .await;
}
