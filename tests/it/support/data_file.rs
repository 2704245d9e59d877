//! `cronq standalone` processes on one SQLite data file, for the tests of what the file
//! keeps: start them (several in turn, or at once), stop, kill and restart them on the same
//! file, run the operations commands on it (`--data`), and read what became of each
//! occurrence from the file's run log, what each process published from its JSON log, and
//! whether the file is intact (`PRAGMA integrity_check`).
//!
//! Every process gets its own log (`<name>.log`), so that a restart does not overwrite the
//! log of the process before it; what was published is read from all of them.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use cronq_shared::names::JobName;
use cronq_shared::runlog::{DEFAULT_MAX_RUNS, Run, RunLog};
use cronq_sqlite::{Db, SqliteRunLog};
use nix::sys::signal::Signal;
use serde_json::Value;

use super::history::{self, Published};
use super::{TestEnv, eventually, until};

/// What every standalone logs: lifecycle, each publish, each attempt.
const RUST_LOG: &str = "info,cronq_producer::publisher=debug,cronq_consumer=debug";

/// How long a standalone may take to start leading, to stop, or to run what it should.
pub const WAIT: Duration = Duration::from_secs(20);

/// A short leader lease, so that a standby takes over within seconds: the lease a standby
/// waits out is [`LEADER_LEASE`].
pub const LEADER: &str =
    "[leader]\nlease = \"2s\"\nrenew_deadline = \"1500ms\"\nretry = \"300ms\"\n";

/// The `lease` of [`LEADER`].
pub const LEADER_LEASE: Duration = Duration::from_secs(2);

/// A job whose command (`/bin/sh -c`) appends its key to `<dir>/<name>.ran`, with the
/// TOML lines `extra`.
pub fn job(env: &TestEnv, name: &str, schedule: &str, extra: &str) -> String {
    let ran = env.dir.join(format!("{name}.ran"));
    let script = format!("echo \"$CRONQ_KEY\" >> '{}'", ran.display());
    job_running(name, schedule, extra, &script)
}

/// A job whose command is `/bin/sh -c SCRIPT`, with the TOML lines `extra`.
pub fn job_running(name: &str, schedule: &str, extra: &str, script: &str) -> String {
    format!(
        "\n[[job]]\nname = \"{name}\"\nschedule = \"{schedule}\"\n{extra}\ncommand = {}\n",
        super::deployment::argv(&["/bin/sh", "-c", script])
    )
}

/// The keys `job`'s command (see [`job`]) appended, in order.
pub fn ran(env: &TestEnv, name: &str) -> Vec<String> {
    std::fs::read_to_string(env.dir.join(format!("{name}.ran")))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A standalone started by [`DataFile::start`].
#[derive(Debug, Clone)]
pub struct Standalone {
    pub pid: u32,
    /// Its log's name: `<dir>/<log>.log`.
    pub log: String,
}

/// One test's data file, its config, and the standalones started on it.
pub struct DataFile {
    pub env: TestEnv,
    /// `<dir>/cronq.db`.
    pub path: PathBuf,
    /// `<dir>/cronq.toml`.
    pub config: PathBuf,
    logs: Mutex<Vec<String>>,
    runlog: OnceLock<SqliteRunLog>,
}

impl DataFile {
    /// The test's data file (not created yet) and its config `toml`.
    pub fn new(env: &TestEnv, toml: &str) -> Self {
        Self {
            env: env.clone(),
            path: env.dir.join("cronq.db"),
            config: env.write_config("cronq.toml", toml),
            logs: Mutex::default(),
            runlog: OnceLock::new(),
        }
    }

    /// A data file at `path` (not created yet; on a mount of the test's, say) and its config
    /// `toml`.
    pub fn at(env: &TestEnv, toml: &str, path: PathBuf) -> Self {
        Self {
            path,
            ..Self::new(env, toml)
        }
    }

    /// Replaces the config (read by the next process started, or on SIGHUP).
    pub fn rewrite_config(&self, toml: &str) {
        std::fs::write(&self.config, toml).expect("rewrite the config");
    }

    /// The file's path as a command-line argument.
    pub fn arg(&self) -> String {
        self.path.to_string_lossy().into_owned()
    }

    /// The CLI's flags for this state: `--config C --data F`.
    pub fn target(&self) -> Vec<String> {
        vec![
            "--config".to_owned(),
            self.config.to_string_lossy().into_owned(),
            "--data".to_owned(),
            self.arg(),
        ]
    }

    /// Starts `cronq standalone --config C --data F ARGS`, logging JSON to `<log>.log`.
    pub fn start(&self, log: &str, args: &[&str]) -> Standalone {
        let mut cmd = self.env.cronq();
        cmd.env("RUST_LOG", RUST_LOG)
            .env_remove("CRONQ_DATA")
            .args(["--log-format", "json", "standalone", "--config"])
            .arg(&self.config)
            .args(["--data", &self.arg()])
            .args(args);
        let pid = self.env.spawn_command(log, cmd);
        self.logs
            .lock()
            .expect("log list lock")
            .push(log.to_owned());
        Standalone {
            pid,
            log: log.to_owned(),
        }
    }

    /// Waits until `s` leads (its log says `became leader`) and returns how long that took.
    pub async fn leading(&self, s: &Standalone) -> Duration {
        let since = Instant::now();
        until(WAIT, &format!("{} to lead", s.log), || async {
            if self.env.log(&s.log).contains("became leader") {
                Ok(since.elapsed())
            } else {
                Err(self.logs())
            }
        })
        .await
    }

    /// SIGTERM: `s` stops publishing, drains and exits 0.
    pub fn stop(&self, s: &Standalone) {
        self.env.signal(s.pid, Signal::SIGTERM);
        let code = self.env.wait(s.pid, WAIT);
        assert_eq!(
            code,
            Some(0),
            "{} did not exit 0 on SIGTERM:\n{}",
            s.log,
            self.logs()
        );
    }

    /// SIGKILL, and waits until `s` is gone (its commands, in their own process groups,
    /// live on, as they would).
    pub fn kill(&self, s: &Standalone) {
        self.env.signal(s.pid, Signal::SIGKILL);
        // Returns as soon as the child is reaped (a killed child has no exit code).
        self.env.wait(s.pid, WAIT);
    }

    /// Runs `cronq ARGS --config C --data F` to completion.
    pub fn command(&self, args: &[&str]) -> Output {
        self.env
            .cronq()
            .env_remove("CRONQ_DATA")
            .args(args)
            .arg("--config")
            .arg(&self.config)
            .args(["--data", &self.arg()])
            .output()
            .expect("run cronq")
    }

    /// Runs `cronq ARGS` on the file, asserting exit 0, and returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.command(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "cronq {args:?} --data {}: exit {:?}\nstdout: {}\nstderr: {}",
            self.path.display(),
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("UTF-8 output")
    }

    /// Runs `cronq ARGS` on the file (a `--json` command) and parses its stdout.
    pub fn json(&self, args: &[&str]) -> Value {
        let text = self.ok(args);
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("cronq {args:?}: not JSON ({e}): {text}"))
    }

    /// Every run of `job` (or of every job) in the file's run log, newest first.
    pub async fn runs(&self, job: Option<&str>) -> Vec<Run> {
        let runlog = self.runlog.get_or_init(|| {
            SqliteRunLog::new(
                open(&self.path),
                Duration::from_secs(3600),
                DEFAULT_MAX_RUNS,
            )
        });
        let job = job.map(|j| JobName::new(j).expect("a job name"));
        runlog
            .list(job.as_ref(), 100_000)
            .await
            .expect("the run history in the data file")
    }

    /// Waits until each of `keys` has a success in the file's run log, then asserts that
    /// none of `job`'s keys succeeded twice; returns `job`'s runs.
    pub async fn once_each(&self, job: &str, keys: &[String]) -> Vec<Run> {
        until(
            WAIT,
            &format!("each of {} keys of {job} to succeed once", keys.len()),
            || async {
                let runs = self.runs(Some(job)).await;
                let problems = history::not_once(keys, &runs);
                if problems.is_empty() {
                    Ok(runs)
                } else if problems.iter().any(|p| p.ends_with("successes")) {
                    panic!(
                        "a key succeeded twice: {problems:#?}\nruns:\n{}{}",
                        history::render_runs(&runs),
                        self.logs()
                    )
                } else {
                    Err(format!(
                        "{problems:#?}\nruns:\n{}{}",
                        history::render_runs(&runs),
                        self.logs()
                    ))
                }
            },
        )
        .await
    }

    /// Every `published occurrence` of `job` the standalones logged, in the order they
    /// were started.
    pub fn published(&self, job: &str) -> Vec<Published> {
        self.log_names()
            .iter()
            .flat_map(|log| history::published_lines(&self.env.log(log), job))
            .collect()
    }

    /// The keys of `job` that standalone `s` logged as published.
    pub fn published_by(&self, s: &Standalone, job: &str) -> Vec<Published> {
        history::published_lines(&self.env.log(&s.log), job)
    }

    /// Waits until standalone `s` published `n` scheduled (trigger `Schedule`) occurrences
    /// of `job`.
    pub async fn scheduled_by(&self, s: &Standalone, job: &str, n: usize) {
        until(
            WAIT,
            &format!("{} to publish {n} ticks of {job}", s.log),
            || async {
                let ticks = self
                    .published_by(s, job)
                    .iter()
                    .filter(|p| p.trigger == "Schedule")
                    .count();
                if ticks >= n { Ok(()) } else { Err(self.logs()) }
            },
        )
        .await;
    }

    /// Waits until `job` has `n` more keys published than now; returns all of them.
    pub async fn advance(&self, job: &str, n: usize) -> Vec<Published> {
        let before = self.published(job).len();
        eventually(WAIT, &format!("{n} more occurrences of {job}"), || async {
            let now = self.published(job);
            (now.len() >= before + n).then_some(now)
        })
        .await
    }

    /// `PRAGMA integrity_check` on the file: `ok` when it is intact.
    pub async fn integrity(&self) -> String {
        open(&self.path)
            .integrity_check()
            .await
            .unwrap_or_else(|e| panic!("integrity check of {}: {e}", self.path.display()))
    }

    /// Asserts the file is intact.
    pub async fn assert_intact(&self) {
        let check = self.integrity().await;
        assert_eq!(
            check,
            "ok",
            "PRAGMA integrity_check of {}",
            self.path.display()
        );
    }

    fn log_names(&self) -> Vec<String> {
        self.logs.lock().expect("log list lock").clone()
    }

    /// The file, and the last lines of every standalone's log, for failure messages.
    pub fn logs(&self) -> String {
        let mut out = format!(
            "\nnamespace {}, data file {}\n",
            self.env.namespace,
            self.path.display()
        );
        for name in self.log_names() {
            let log = self.env.log(&name);
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(30)..];
            out.push_str(&format!("--- {name}.log (last {} lines)\n", tail.len()));
            for l in tail {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }
}

/// Opens `path` on a connection of its own, as one more process would.
pub fn open(path: &Path) -> Db {
    Db::open(path, cronq_sqlite::Sync::Normal)
        .unwrap_or_else(|e| panic!("open the data file {}: {e}", path.display()))
}

/// The scheduled second of each key, in order (keys of manual triggers left out).
pub fn seconds(published: &[Published]) -> Vec<i64> {
    let mut out: Vec<i64> = published
        .iter()
        .filter(|p| !p.key.contains("@manual-"))
        .map(|p| history::scheduled(&p.key))
        .collect();
    out.sort_unstable();
    out
}

/// The keys of `published`, deduplicated, in order.
pub fn keys(published: &[Published]) -> Vec<String> {
    let mut out: Vec<String> = published.iter().map(|p| p.key.clone()).collect();
    out.sort();
    out.dedup();
    out
}

/// Raw SQL on a data file, below the ports, for what no port offers: the schema version,
/// a foreign row in the queue, the live subscribers (the tables of
/// `backends/sqlite/src/schema/1.sql`).
pub mod raw {
    use std::path::Path;
    use std::time::{SystemTime, UNIX_EPOCH};

    use rusqlite::Connection;

    fn connect(path: &Path) -> Connection {
        Connection::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
    }

    fn now_ms() -> i64 {
        let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        i64::try_from(since.as_millis()).unwrap()
    }

    /// `PRAGMA user_version`: the schema version.
    pub fn user_version(path: &Path) -> i64 {
        connect(path)
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap()
    }

    /// Runs `sql` on the file, as another program could.
    pub fn execute(path: &Path, sql: &str) {
        connect(path).execute_batch(sql).unwrap();
    }

    /// Sets `PRAGMA user_version`, as a newer cronq would have.
    pub fn set_user_version(path: &Path, version: i64) {
        connect(path)
            .pragma_update(None, "user_version", version)
            .unwrap();
    }

    /// Puts `body` on `queue` as a foreign publisher could (ready now).
    pub fn publish(path: &Path, queue: &str, body: &[u8]) {
        connect(path)
            .execute(
                "INSERT INTO messages (queue, body, ready_at) VALUES (?1, ?2, ?3)",
                rusqlite::params![queue, body, now_ms()],
            )
            .unwrap();
    }

    /// How many processes consume from the file (subscribers that renewed recently).
    pub fn subscribers(path: &Path) -> usize {
        let n: i64 = connect(path)
            .query_row(
                "SELECT count(*) FROM subscribers WHERE alive_until > ?1",
                [now_ms()],
                |r| r.get(0),
            )
            .unwrap();
        usize::try_from(n).unwrap()
    }
}
