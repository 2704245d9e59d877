//! Real `cronq` processes for behaviour tests: a fleet (producers and consumers on
//! RabbitMQ and Redis, under the test's namespace) or one `cronq standalone` (in memory,
//! or on the test's SQLite data file), with one way to stop publishing and to read what was
//! published and what became of it, whichever runs.
//!
//! Every process logs JSON with the producers' `published occurrence` lines and the
//! consumers' per-attempt lines on, so the keys published are known from outside; a
//! fleet's history is read from the run log in Redis, a standalone's on a data file from
//! the run log in that file, an in-memory standalone's from its log (its history is in its
//! memory, which no other process can read).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use cronq_redis::RedisRunLog;
use cronq_shared::endpoints::Tls;
use cronq_shared::names::{JobName, Names, Namespace};
use cronq_shared::runlog::{DEFAULT_MAX_RUNS, RunLog};
use cronq_sqlite::SqliteRunLog;
use nix::sys::signal::Signal;

use super::backends::Backend;
use super::data_file;
use super::history::{self, Entry};
use super::ports;
use super::{TestEnv, eventually, free_addr, redis_url};

/// What every process logs: lifecycle, each publish, each attempt.
pub const RUST_LOG: &str = "info,lapin=warn,cronq_producer::publisher=debug,cronq_consumer=debug";

/// A short leader lease, so that a standby takes over quickly if it must.
pub const LEADER: &str =
    "[leader]\nlease = \"2s\"\nrenew_deadline = \"1500ms\"\nretry = \"500ms\"\n";

/// A `command` argv as a TOML value.
pub fn argv(args: &[&str]) -> String {
    // A JSON array of strings is a TOML array of basic strings.
    serde_json::to_string(args).expect("strings serialize")
}

/// A config for the runtime-job tests: `leader`, the handler `append` (it appends each key
/// to `<dir>/<job>.ran`), `extra`, and the file job `tick` every second on `append`, so that
/// every process has the queue `default`.
pub fn appending_config(env: &TestEnv, leader: &str, extra: &str) -> String {
    let script = format!(
        "echo \"$CRONQ_KEY\" >> '{}'/\"$CRONQ_JOB\".ran",
        env.dir.display()
    );
    format!(
        "{leader}\n[handlers.append]\ncommand = {}\n{extra}\n[[job]]\nname = \"tick\"\nschedule = \"@every 1s\"\nhandler = \"append\"\n",
        argv(&["/bin/sh", "-c", &script])
    )
}

/// How long a process may take to stop publishing.
const STOP: Duration = Duration::from_secs(10);

/// Which processes run the jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deployment {
    /// `cronq producer` ×2 and `cronq consumer` ×N on RabbitMQ and Redis.
    Fleet,
    /// One `cronq standalone` (producer and consumer in one process) on `Data`.
    Standalone(Data),
}

/// Where a standalone keeps its state (`--data`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Data {
    /// `--data :memory:`: in its memory, gone with the process.
    Memory,
    /// `--data <dir>/cronq.db`: the test's SQLite data file.
    File,
}

impl Deployment {
    /// The deployment that runs on `backend`'s ports: `cronq standalone` in memory or on
    /// the test's data file, a fleet on RabbitMQ and Redis.
    pub fn on(backend: Backend) -> Self {
        match backend {
            Backend::Memory => Self::Standalone(Data::Memory),
            Backend::Real => Self::Fleet,
            Backend::Sqlite => Self::Standalone(Data::File),
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Self::Fleet => "fleet",
            Self::Standalone(Data::Memory) => "standalone in memory",
            Self::Standalone(Data::File) => "standalone on a data file",
        }
    }

    /// One `cronq standalone`, whatever its data.
    pub fn is_standalone(self) -> bool {
        matches!(self, Self::Standalone(_))
    }
}

/// How to start a deployment.
#[derive(Debug, Clone)]
pub struct Options {
    /// The broker of a fleet; default the shared one (`CRONQ_AMQP_URL`).
    pub amqp_url: Option<String>,
    /// The Redis of a fleet (its history is read there too); default the shared one.
    pub redis_url: Option<String>,
    /// More environment for every process.
    pub env: Vec<(&'static str, String)>,
    /// Consumers of a fleet.
    pub consumers: usize,
    /// A fleet consumer's execution lease (`--lease`): a heartbeat every third of it.
    pub lease: &'static str,
    /// The TLS files the run history is read with (the processes get theirs in `env`).
    pub tls: Tls,
    /// More arguments for every fleet consumer (`--concurrency 8`).
    pub consumer_args: Vec<&'static str>,
    /// More environment for one process only, by its log name (`producer-1`,
    /// `consumer-2`), over `env`: to send one process through a proxy.
    pub env_of: Vec<(String, &'static str, String)>,
    /// Whether a fleet's producers serve `/metrics` ([`Running::metrics`]).
    pub producer_admin: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            amqp_url: None,
            redis_url: None,
            env: Vec::new(),
            consumers: 2,
            lease: "3s",
            tls: Tls::default(),
            consumer_args: Vec::new(),
            env_of: Vec::new(),
            producer_admin: false,
        }
    }
}

/// A running deployment; its processes are killed at the test's clean-up.
pub struct Running {
    env: TestEnv,
    kind: Deployment,
    config: PathBuf,
    producers: Vec<u32>,
    consumers: Vec<u32>,
    standalone: Option<u32>,
    /// A standalone's admin address (`/metrics`).
    pub admin: Option<String>,
    /// A fleet's producers' admin addresses, when [`Options::producer_admin`].
    producer_admins: Vec<String>,
    /// A fleet's run history.
    runlog: Option<RedisRunLog>,
    /// A standalone's data file, and its run history once first read (opened late, so
    /// that the standalone creates the file).
    data: Option<(PathBuf, OnceLock<SqliteRunLog>)>,
    names: Names,
}

impl Running {
    /// Starts `kind` on the config `toml` with default options.
    pub async fn start(kind: Deployment, env: &TestEnv, toml: &str) -> Self {
        Self::start_with(kind, env, toml, Options::default()).await
    }

    /// Starts `kind` on the config `toml` (one with the file job `tick`, as
    /// [`appending_config`] writes) and waits until `tick` has run once.
    pub async fn start_ticking(kind: Deployment, env: &TestEnv, toml: &str) -> Self {
        let running = Self::start(kind, env, toml).await;
        running
            .until_succeeded("tick", 1, Duration::from_secs(20), "tick to run")
            .await;
        running
    }

    /// Starts `kind` on the config `toml`.
    pub async fn start_with(kind: Deployment, env: &TestEnv, toml: &str, options: Options) -> Self {
        let config = env.write_config("cronq.toml", toml);
        let names = Names::new(&Namespace::new(&env.namespace).expect("test namespace"));
        let command = |log: &str, args: &[&str]| {
            let mut cmd = env.cronq();
            cmd.env("RUST_LOG", RUST_LOG)
                .args(["--log-format", "json", "--config"])
                .arg(&config)
                .args(args);
            if let Some(url) = &options.amqp_url {
                cmd.env("CRONQ_AMQP_URL", url);
            }
            if let Some(url) = &options.redis_url {
                cmd.env("CRONQ_REDIS_URL", url);
            }
            cmd.envs(options.env.iter().map(|(k, v)| (k, v)));
            cmd.envs(
                options
                    .env_of
                    .iter()
                    .filter(|(name, _, _)| name == log)
                    .map(|(_, k, v)| (k, v)),
            );
            env.spawn_command(log, cmd)
        };
        let mut running = Self {
            env: env.clone(),
            kind,
            config: config.clone(),
            producers: Vec::new(),
            consumers: Vec::new(),
            standalone: None,
            admin: None,
            producer_admins: Vec::new(),
            runlog: None,
            data: None,
            names: names.clone(),
        };
        match kind {
            Deployment::Fleet => {
                env.track_queue("default");
                for i in 1..=2 {
                    let mut args = vec!["producer".to_owned()];
                    if options.producer_admin {
                        let admin = free_addr();
                        args.extend(["--admin-addr".to_owned(), admin.clone()]);
                        running.producer_admins.push(admin);
                    }
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    running
                        .producers
                        .push(command(&format!("producer-{i}"), &args));
                }
                for i in 1..=options.consumers {
                    let id = format!("consumer-{i}");
                    let mut args = vec!["consumer", "--consumer-id", &id, "--lease", options.lease];
                    args.extend(&options.consumer_args);
                    let pid = command(&id, &args);
                    running.consumers.push(pid);
                }
                let url = options.redis_url.clone().unwrap_or_else(redis_url);
                let conn = cronq_redis::connect_tls(&url, &options.tls)
                    .await
                    .expect("Redis for the run history");
                running.runlog = Some(RedisRunLog::new(conn, &names, Duration::from_secs(3600)));
            }
            Deployment::Standalone(data) => {
                let admin = free_addr();
                let file = ports::data_file(env);
                let data_arg = match data {
                    Data::Memory => ":memory:".to_owned(),
                    Data::File => file.to_string_lossy().into_owned(),
                };
                running.standalone = Some(command(
                    "standalone",
                    &["standalone", "--admin-addr", &admin, "--data", &data_arg],
                ));
                running.admin = Some(admin);
                if data == Data::File {
                    running.data = Some((file, OnceLock::new()));
                }
            }
        }
        running
    }

    fn log_names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.env.dir)
            .map(|dir| {
                dir.filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .filter_map(|n| n.strip_suffix(".log").map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// The log name (`producer-N`) and pid of the producer that leads now, as the
    /// producers' logs say (the last leadership line of each).
    pub fn leader(&self) -> Option<(String, u32)> {
        self.producers.iter().enumerate().find_map(|(i, pid)| {
            let name = format!("producer-{}", i + 1);
            let log = self.env.log(&name);
            let last = log
                .lines()
                .rfind(|l| l.contains("became leader") || l.contains("lost leadership"))?;
            last.contains("became leader").then_some((name, *pid))
        })
    }

    /// Every process's pid: producers, consumers, or the standalone.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = self.producers.clone();
        pids.extend(&self.consumers);
        pids.extend(self.standalone);
        pids
    }

    /// Runs `cronq --config C [--data F] ARGS` against this deployment's stores (a
    /// standalone in memory has none an outside command can reach).
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        let mut cmd = self.env.cronq();
        cmd.arg("--config").arg(&self.config);
        if let Some((file, _)) = &self.data {
            cmd.arg("--data").arg(file);
        }
        cmd.args(args).output().expect("run cronq")
    }

    /// [`Running::cli`], asserting it succeeds: its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "cronq {args:?}: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    /// The config file every process reads.
    pub fn config_path(&self) -> &std::path::Path {
        &self.config
    }

    /// A standalone's data file, if it runs on one.
    pub fn data_file(&self) -> Option<&std::path::Path> {
        self.data.as_ref().map(|(file, _)| file.as_path())
    }

    /// The pids of a fleet's consumers, in start order (`consumer-1` first).
    pub fn consumers(&self) -> &[u32] {
        &self.consumers
    }

    /// Keys of `job` published so far, by any producer.
    pub fn published(&self, job: &str) -> BTreeSet<String> {
        self.log_names()
            .iter()
            .filter(|n| n.starts_with("producer") || n.as_str() == "standalone")
            .flat_map(|n| history::published(&self.env.log(n), job))
            .collect()
    }

    /// Keys of `job` published so far for an instant after `after`.
    pub fn published_after(&self, job: &str, after: chrono::DateTime<chrono::Utc>) -> Vec<String> {
        self.published(job)
            .into_iter()
            .filter(|k| history::scheduled_at(k) > after)
            .collect()
    }

    /// Sends `sig` to every process of the deployment.
    pub fn signal_all(&self, sig: Signal) {
        for pid in self.pids() {
            self.env.signal(pid, sig);
        }
    }

    /// Waits up to `within` until `job` has `n` successful attempts in the history; on
    /// timeout the test fails with `what` and every process's last log lines.
    pub async fn until_succeeded(&self, job: &str, n: usize, within: Duration, what: &str) {
        super::until(within, what, || async {
            let done = self
                .entries(job)
                .await
                .iter()
                .filter(|e| e.outcome == cronq_shared::runlog::Outcome::Succeeded)
                .count();
            if done >= n { Ok(()) } else { Err(self.logs()) }
        })
        .await;
    }

    /// Every history entry of `job` so far.
    pub async fn entries(&self, job: &str) -> Vec<Entry> {
        let name = JobName::new(job).expect("a job name");
        if let Some(runlog) = &self.runlog {
            // Through Sentinel, a read may meet a failover (the connection returns the
            // error and moves to the new master; it never replays): read again, as the
            // deployment's own processes do.
            let started = std::time::Instant::now();
            let runs = loop {
                match runlog.list(Some(&name), 10_000).await {
                    Ok(runs) => break runs,
                    Err(err) if started.elapsed() < Duration::from_secs(30) => {
                        eprintln!("reading the run history again: {err}");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(err) => panic!("the run history in Redis: {err:?}"),
                }
            };
            return history::from_runs(&runs);
        }
        if let Some((file, runlog)) = &self.data {
            let runlog = runlog.get_or_init(|| {
                SqliteRunLog::new(
                    data_file::open(file),
                    Duration::from_secs(3600),
                    DEFAULT_MAX_RUNS,
                )
            });
            let runs = runlog
                .list(Some(&name), 10_000)
                .await
                .expect("the run history in the data file");
            return history::from_runs(&runs);
        }
        history::from_json_log(&self.env.log("standalone"), job)
    }

    /// Stops publishing: a fleet's producers get SIGTERM and exit (the leader releases at
    /// once); a standalone reloads a config without jobs on SIGHUP (its producer half then
    /// publishes nothing; its consumer half keeps the config it started with and drains).
    pub async fn stop_producing(&self) {
        match self.standalone {
            None => {
                for pid in &self.producers {
                    self.env.signal(*pid, Signal::SIGTERM);
                }
                for pid in &self.producers {
                    let code = self.env.wait(*pid, STOP);
                    assert!(
                        code.is_some(),
                        "producer {pid} did not exit within {STOP:?}:\n{}",
                        self.logs()
                    );
                }
            }
            Some(pid) => {
                let applied = |log: String| log.matches("leader applied reloaded config").count();
                let before = applied(self.env.log("standalone"));
                std::fs::write(
                    &self.config,
                    "# every job removed: the producer half stops publishing\n",
                )
                .expect("rewrite the config");
                self.env.signal(pid, Signal::SIGHUP);
                eventually(
                    STOP,
                    "the standalone to apply the job-less config",
                    || async { (applied(self.env.log("standalone")) > before).then_some(()) },
                )
                .await;
            }
        }
    }

    /// A standalone's `/metrics`, or those of a fleet's producers one after the other
    /// (with [`Options::producer_admin`]).
    pub async fn metrics(&self) -> Option<String> {
        let mut text = String::new();
        for admin in self.admin.iter().chain(&self.producer_admins) {
            let page = super::metrics_page(admin).await.ok()?;
            text.push_str(&page);
        }
        (!text.is_empty()).then_some(text)
    }

    /// The namespace, and the last lines of every process's log, for failure messages.
    pub fn logs(&self) -> String {
        let mut out = format!(
            "namespace {} ({}), dir {}\n",
            self.names.namespace().as_str(),
            self.kind.label(),
            self.env.dir.display()
        );
        for name in self.log_names() {
            let log = self.env.log(&name);
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(25)..];
            out.push_str(&format!("--- {name}.log (last {} lines)\n", tail.len()));
            for l in tail {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }
}
