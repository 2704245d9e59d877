//! What the behaviour modules share, and nothing else: the test environment (a fresh
//! namespace per test against the real RabbitMQ and Redis, cleaned up even when the test
//! panics, and the real `cronq` binary run in it), the backends every suite runs on
//! ([`backends`], [`ports`]), and the helpers of each way of running cronq: in-process
//! consumers ([`fleet`]) and producers ([`producers`], [`published`]), processes
//! ([`producer_process`], [`consumer_process`], [`deployment`], [`history`]), standalones
//! on one data file ([`data_file`], and [`tmpfs`] for a read-only or full disk), the command
//! line ([`cli`], [`config_dir`]), the queue ([`occurrences`], [`deliveries`],
//! [`rabbitmq`], and a [`proxy`] to take RabbitMQ away from one process), the ledger ([`inspect`]), the extra RabbitMQ node ([`nodes`]), an OTLP trace receiver ([`otlp`]), the
//! high-availability harness of the `ha` tests ([`ha`]) and the TLS harness of the `tls`
//! tests ([`tls`]).

#![allow(dead_code)]

pub mod alert_sinks;
pub mod backends;
pub mod cli;
pub mod config_dir;
pub mod consumer_process;
pub mod dashboard;
pub mod data_file;
pub mod deliveries;
pub mod deployment;
pub mod fleet;
pub mod ha;
pub mod history;
pub mod inspect;
pub mod json_log;
pub mod nodes;
pub mod occurrences;
pub mod otlp;
pub mod ports;
pub mod procfs;
pub mod producer_process;
pub mod producers;
pub mod proxy;
pub mod published;
pub mod rabbitmq;
pub mod tls;
pub mod tmpfs;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cronq_rabbitmq::topology;
use cronq_shared::names::{Names, Namespace, QueueName};

pub const AMQP_URL_DEFAULT: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
pub const REDIS_URL_DEFAULT: &str = "redis://127.0.0.1:6379";

pub fn amqp_url() -> String {
    std::env::var("CRONQ_AMQP_URL").unwrap_or_else(|_| AMQP_URL_DEFAULT.into())
}

pub fn redis_url() -> String {
    std::env::var("CRONQ_REDIS_URL").unwrap_or_else(|_| REDIS_URL_DEFAULT.into())
}

/// One test's private world: namespace, temp dir, and the children it started.
#[derive(Clone)]
pub struct TestEnv {
    pub namespace: String,
    pub dir: PathBuf,
    children: Arc<Mutex<Vec<Child>>>,
    queues: Arc<Mutex<Vec<String>>>,
    raw_queues: Arc<Mutex<Vec<String>>>,
    other_brokers: Arc<Mutex<Vec<OtherBroker>>>,
}

/// A broker besides the shared one that a test declares things on (see
/// [`TestEnv::clean_broker_too`]).
#[derive(Clone)]
struct OtherBroker {
    url: String,
    /// Its RabbitMQ node name, to list the namespace's queues (delay queues included) with
    /// `rabbitmqctl` at clean-up.
    node: Option<String>,
}

impl TestEnv {
    fn new(test: &str) -> Self {
        let namespace = format!("t-{test}-{:08x}", rand::random::<u32>());
        let dir = std::env::temp_dir().join(&namespace);
        std::fs::create_dir_all(&dir).expect("create test dir");
        Self {
            namespace,
            dir,
            children: Arc::default(),
            queues: Arc::default(),
            raw_queues: Arc::default(),
            other_brokers: Arc::default(),
        }
    }

    /// Also deletes the namespace's queues and exchanges on the broker at `url` at
    /// clean-up: the tracked queues, and with `node` every queue whose name starts with the
    /// namespace (as `rabbitmqctl -n NODE list_queues` shows them).
    pub fn clean_broker_too(&self, url: &str, node: Option<&str>) {
        self.other_brokers
            .lock()
            .expect("broker list lock")
            .push(OtherBroker {
                url: url.to_owned(),
                node: node.map(str::to_owned),
            });
    }

    /// Remembers a logical queue name so clean-up deletes its broker queue.
    pub fn track_queue(&self, queue: &str) {
        self.queues.lock().unwrap().push(queue.to_owned());
    }

    /// Remembers a broker queue by its full name (e.g. a delay queue) for clean-up.
    pub fn track_raw_queue(&self, queue: &str) {
        self.raw_queues
            .lock()
            .expect("raw queue list lock")
            .push(queue.to_owned());
    }

    /// Writes a config file into the test dir and returns its path.
    pub fn write_config(&self, name: &str, toml: &str) -> PathBuf {
        let path = self.dir.join(name);
        std::fs::write(&path, toml).expect("write config");
        path
    }

    /// A `cronq` command with this test's namespace and the service URLs set.
    pub fn cronq(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cronq"));
        cmd.env("CRONQ_NAMESPACE", &self.namespace)
            .env("CRONQ_AMQP_URL", amqp_url())
            .env("CRONQ_REDIS_URL", redis_url())
            .env_remove("CRONQ_CONFIG")
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info,lapin=warn".into()),
            )
            .current_dir(&self.dir);
        cmd
    }

    /// Runs `cronq ARGS` to completion.
    pub fn run(&self, args: &[&str]) -> Output {
        self.cronq().args(args).output().expect("run cronq")
    }

    /// Starts `cronq ARGS` in the background; it is killed at clean-up. Its stderr goes to
    /// `<dir>/<log>.log`.
    pub fn spawn(&self, log: &str, args: &[&str]) -> u32 {
        let mut cmd = self.cronq();
        cmd.args(args);
        self.spawn_command(log, cmd)
    }

    /// Starts a prepared `cronq` command (see [`TestEnv::cronq`]) in the background, like
    /// [`TestEnv::spawn`].
    pub fn spawn_command(&self, log: &str, mut cmd: Command) -> u32 {
        let file = std::fs::File::create(self.dir.join(format!("{log}.log"))).expect("log file");
        let child = cmd
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("spawn cronq");
        let pid = child.id();
        self.children.lock().unwrap().push(child);
        pid
    }

    /// The log a spawned child wrote.
    pub fn log(&self, log: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{log}.log"))).unwrap_or_default()
    }

    /// Sends `sig` to a spawned child.
    pub fn signal(&self, pid: u32, sig: nix::sys::signal::Signal) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig);
    }

    /// Waits for a spawned child to exit and returns its exit code.
    pub fn wait(&self, pid: u32, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            {
                let mut children = self.children.lock().unwrap();
                if let Some(child) = children.iter_mut().find(|c| c.id() == pid) {
                    if let Ok(Some(status)) = child.try_wait() {
                        return status.code();
                    }
                } else {
                    return None;
                }
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The names of this test's namespace (its Redis keys, its queues).
    pub fn names(&self) -> Names {
        Names::new(&Namespace::new(&self.namespace).expect("test namespace"))
    }

    /// A Redis connection.
    pub async fn redis(&self) -> redis::aio::MultiplexedConnection {
        let client = redis::Client::open(redis_url()).expect("redis url");
        client
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "cannot reach Redis at {}: {e}\nstart it with: redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save \"\" --appendonly no",
                    redis_url()
                )
            })
    }

    /// An AMQP connection.
    pub async fn amqp(&self) -> lapin::Connection {
        lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default())
            .await
            .unwrap_or_else(|e| {
                panic!("cannot reach RabbitMQ at 127.0.0.1:5672: {e}\nstart it with: rabbitmq-server -detached")
            })
    }

    /// Kills the children still running (they write no more keys).
    pub fn kill_children(&self) {
        for mut child in self.children.lock().unwrap().drain(..) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Deletes every queue, exchange and Redis key of the namespace, and kills children.
    pub async fn delete_namespace(&self) {
        self.kill_children();
        let mut conn = self.redis().await;
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}:*", self.namespace))
            .query_async(&mut conn)
            .await
            .unwrap_or_default();
        if !keys.is_empty() {
            let _: Result<(), _> = redis::cmd("DEL").arg(&keys).query_async(&mut conn).await;
        }
        let amqp = self.amqp().await;
        let ch = amqp.create_channel().await.expect("channel");
        let names = self.names();
        let queues: Vec<QueueName> = self
            .queues
            .lock()
            .unwrap()
            .iter()
            .filter_map(|q| QueueName::new(q).ok())
            .collect();
        let raw = self.raw_queues.lock().expect("raw queue list lock").clone();
        topology::delete_namespace(&ch, &names, &queues, raw.clone()).await;
        let _ = amqp.close(200, "test done".into()).await;
        let others = self.other_brokers.lock().expect("broker list lock").clone();
        for other in others {
            self.delete_namespace_on(&other, &names, &queues, &raw)
                .await;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    /// Best effort: a broker that does not answer is reported, not a panic, so the test's
    /// own failure stays the one shown.
    async fn delete_namespace_on(
        &self,
        broker: &OtherBroker,
        names: &Names,
        queues: &[QueueName],
        raw: &[String],
    ) {
        let connect =
            lapin::Connection::connect(&broker.url, lapin::ConnectionProperties::default());
        let amqp = match tokio::time::timeout(Duration::from_secs(10), connect).await {
            Ok(Ok(amqp)) => amqp,
            Ok(Err(err)) => {
                eprintln!(
                    "clean-up: cannot reach {}: {err}",
                    nodes::redact(&broker.url)
                );
                return;
            }
            Err(_) => {
                eprintln!(
                    "clean-up: {} did not answer within 10 s",
                    nodes::redact(&broker.url)
                );
                return;
            }
        };
        let mut others = raw.to_vec();
        if let Some(node) = &broker.node {
            let prefix = format!("{}.", self.namespace);
            others.extend(
                nodes::queues(node)
                    .into_iter()
                    .filter(|q| q.starts_with(&prefix)),
            );
        }
        if let Ok(ch) = amqp.create_channel().await {
            topology::delete_namespace(&ch, names, queues, others).await;
        }
        let _ = amqp.close(200, "test done".into()).await;
    }
}

/// Runs `body` against live services under a fresh namespace; cleans up even if `body`
/// panics.
pub async fn scoped<F, Fut>(test: &str, body: F)
where
    F: FnOnce(TestEnv) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let env = TestEnv::new(test);
    let outcome = tokio::spawn(body(env.clone())).await;
    if outcome.is_err() {
        eprintln!(
            "test {test} failed in namespace {} (dir {})",
            env.namespace,
            env.dir.display()
        );
    }
    env.delete_namespace().await;
    if let Err(err) = outcome {
        std::panic::resume_unwind(err.into_panic());
    }
}

/// Polls `probe` every 50 ms until it returns `Some`, or panics after `timeout` with
/// `what`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `probe` every 50 ms until it returns `Ok`, or panics after `timeout` with `what`
/// and the last `Err` it returned (the state last seen).
pub async fn until<T, F, Fut>(timeout: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match probe().await {
            Ok(v) => return v,
            Err(last) if Instant::now() > deadline => {
                panic!("timed out after {timeout:?} waiting for {what}; last seen:\n{last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// The `/metrics` page of the admin server at `admin` (`HOST:PORT`).
pub async fn metrics_page(admin: &str) -> reqwest::Result<String> {
    reqwest::get(format!("http://{admin}/metrics"))
        .await?
        .text()
        .await
}

/// A loopback address with a port that was free a moment ago.
pub fn free_addr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local addr").to_string()
}

/// Path of a file in the repository.
pub fn repo_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}
