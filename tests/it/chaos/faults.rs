//! The soak's processes and the faults it injects into them: which process, when it comes
//! back, and a record of every fault for the checker (a re-run must follow a kill or a
//! freeze) and the table.
//!
//! The broker and Redis are shared with other tests: only the connections of this soak's
//! own processes are closed, found by their local ports, matched to RabbitMQ's
//! `list_connections` peer ports and to Redis's `CLIENT LIST` addresses. On the local
//! services each process reaches Redis and RabbitMQ through proxies of its own
//! (`support::proxy`), whose connections to the services are the ones closed, and which cut
//! or stall one link of one process for a while (a network partition): for less or more
//! than the consumer's execution lease and the producers' leader lease. On the harness of
//! `scripts/ha` (no proxies: its processes reach Redis through Sentinel, at the addresses it
//! names; their connections are found with `ss`) the soak also stops and starts a RabbitMQ
//! node (`stop_app`, `start_app`), drains one (`rabbitmq-upgrade drain`, then `revive`),
//! moves the job queue's leader to another node, cuts a node off from the other two (a
//! partition: `pause_minority` stops it until healed), kills the Redis master (Sentinel
//! promotes a replica; the old master comes back as a replica) and makes a planned switch
//! (a plain `SENTINEL FAILOVER`, no pause first: the switch barrier of docs/ha.md); one
//! RabbitMQ node fault and one Redis fault at a time.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use nix::sys::signal::Signal;
use rand::{Rng, RngExt};

use super::{LEASE, PAUSABLE, cronq};
use crate::support::TestEnv;
use crate::support::ha::Ha;
use crate::support::proxy::{Link, Proxy};

/// What every process logs.
const RUST_LOG: &str = "info,lapin=warn";

/// One fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    KillConsumer,
    KillProducer,
    FreezeConsumer,
    FreezeProducer,
    CloseAmqp,
    KillRedisClients,
    Reload,
    Pause,
    Trigger,
    Backfill,
    CutRedis,
    StallRedis,
    CutAmqp,
    StallAmqp,
    StopRabbitNode,
    DrainRabbitNode,
    MoveQueueLeader,
    PartitionRabbitNode,
    KillRedisMaster,
    SentinelFailover,
}

impl Fault {
    /// Its name in the table.
    pub fn name(self) -> &'static str {
        match self {
            Fault::KillConsumer => "SIGKILL + restart consumer",
            Fault::KillProducer => "SIGKILL + restart producer",
            Fault::FreezeConsumer => "SIGSTOP consumer past its lease, SIGCONT",
            Fault::FreezeProducer => "SIGSTOP producer past the leader lease, SIGCONT",
            Fault::CloseAmqp => "AMQP connections closed (rabbitmqctl close_connection)",
            Fault::KillRedisClients => "Redis clients killed (CLIENT KILL ID)",
            Fault::Reload => "SIGHUP reload with a changed config",
            Fault::Pause => "pause, then resume, a job",
            Fault::Trigger => "cronq trigger",
            Fault::Backfill => "cronq backfill over the last 30 s",
            Fault::CutRedis => "one process cut from Redis, 1-8 s",
            Fault::StallRedis => "one process's Redis link stalled, 1-8 s",
            Fault::CutAmqp => "one process cut from RabbitMQ, 1-8 s",
            Fault::StallAmqp => "one process's RabbitMQ link stalled, 1-8 s",
            Fault::StopRabbitNode => "RabbitMQ node stop_app, start_app",
            Fault::DrainRabbitNode => "RabbitMQ node drained (rabbitmq-upgrade), revived",
            Fault::MoveQueueLeader => "job queue leader moved to another node",
            Fault::PartitionRabbitNode => "RabbitMQ node cut off from the other two, healed",
            Fault::KillRedisMaster => "Redis master killed (Sentinel promotes a replica)",
            Fault::SentinelFailover => "planned switch (SENTINEL FAILOVER)",
        }
    }

    /// A fault at random, weighted: process faults most often; on the local services the
    /// partitions of one process, with `ha` the harness's node faults.
    pub fn pick(rng: &mut impl Rng, ha: bool) -> Self {
        const HA: [(Fault, u32); 6] = [
            (Fault::StopRabbitNode, 1),
            (Fault::DrainRabbitNode, 1),
            (Fault::MoveQueueLeader, 1),
            (Fault::PartitionRabbitNode, 1),
            (Fault::KillRedisMaster, 1),
            (Fault::SentinelFailover, 1),
        ];
        const LOCAL: [(Fault, u32); 4] = [
            (Fault::CutRedis, 2),
            (Fault::StallRedis, 1),
            (Fault::CutAmqp, 1),
            (Fault::StallAmqp, 1),
        ];
        const WEIGHTED: [(Fault, u32); 10] = [
            (Fault::KillConsumer, 4),
            (Fault::KillProducer, 3),
            (Fault::FreezeConsumer, 3),
            (Fault::FreezeProducer, 2),
            (Fault::CloseAmqp, 2),
            (Fault::KillRedisClients, 2),
            (Fault::Reload, 1),
            (Fault::Pause, 1),
            (Fault::Trigger, 1),
            (Fault::Backfill, 1),
        ];
        let extra: &[(Fault, u32)] = if ha { &HA } else { &LOCAL };
        let all = || WEIGHTED.iter().chain(extra).copied();
        let total: u32 = all().map(|w| w.1).sum();
        let mut at = rng.random_range(0..total);
        for (fault, weight) in all() {
            if at < weight {
                return fault;
            }
            at -= weight;
        }
        Fault::KillConsumer
    }
}

/// A fault that can make a consumer run an attempt again.
#[derive(Debug, Clone)]
pub struct Event {
    pub at: DateTime<Utc>,
    /// `kill`, `freeze` or `partition` (of a consumer from Redis), or `connections`.
    pub kind: &'static str,
}

/// The [`Event`] kind of a cut or stalled `link` of a member of `role`, if it can make a
/// consumer run an attempt again: a consumer without Redis past its lease stops its
/// attempts, and they run again elsewhere; without RabbitMQ, a member's deliveries (or
/// confirms) come back.
fn cut_event(role: &str, link: Link) -> Option<&'static str> {
    match link {
        Link::Redis => (role == "consumer").then_some("partition"),
        Link::Amqp => Some("connections"),
    }
}

/// A member's own proxies to the local Redis and RabbitMQ, and their URLs.
struct Links {
    redis: (Proxy, String),
    amqp: (Proxy, String),
}

impl Links {
    /// Both proxies, on `runtime`.
    async fn start(runtime: &tokio::runtime::Handle) -> Self {
        let on = |link| runtime.spawn(Proxy::before(link));
        Self {
            redis: on(Link::Redis).await.expect("start a proxy"),
            amqp: on(Link::Amqp).await.expect("start a proxy"),
        }
    }

    fn proxy(&self, link: Link) -> &Proxy {
        match link {
            Link::Redis => &self.redis.0,
            Link::Amqp => &self.amqp.0,
        }
    }
}

struct Member {
    role: &'static str,
    name: String,
    pid: u32,
    generation: u32,
    up: bool,
    frozen: bool,
    /// Its proxies, on the local services.
    links: Option<Links>,
    /// One of its links is cut or stalled now.
    partitioned: bool,
}

enum Pending {
    Restart(usize),
    Cont(usize),
    Resume(String),
    /// Member N's link restored.
    Restore(usize, Link),
    /// `start_app` on harness node N.
    StartApp(usize),
    /// `rabbitmq-upgrade revive` of harness node N.
    Revive(usize),
    /// A RabbitMQ node fault over: the next may come.
    RabbitSettled,
    /// The harness healed after a partition of node N (every node back, Redis too).
    HealPartition(usize),
    /// The harness's Redis on this port started again.
    StartRedis(u16),
    /// A Redis fault over: the next may come.
    RedisSettled,
}

/// The runtime the proxies run on. The soak blocks its own runtime's threads at times
/// (`rabbitmqctl`, `cronq` commands, waiting for a process to exit), which would stall the
/// connections a proxy there forwards: a partition no fault made.
struct ProxyRuntime(Option<tokio::runtime::Runtime>);

impl Drop for ProxyRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// The soak's processes.
pub struct Fleet {
    env: TestEnv,
    /// The harness the fleet runs on, if not the local services.
    ha: Option<Ha>,
    /// The harness's RabbitMQ node stopped now.
    rabbit_down: Option<usize>,
    /// A Redis fault of the harness is under way.
    redis_busy: bool,
    config: PathBuf,
    members: Vec<Member>,
    pending: Vec<(Instant, Pending)>,
    /// Faults that can cause a re-run, in order.
    pub events: Vec<Event>,
    /// How many faults of each kind were injected.
    pub faults: BTreeMap<&'static str, usize>,
    /// Each pause: the job, when it was paused and when resumed.
    pub paused: Vec<(String, DateTime<Utc>, DateTime<Utc>)>,
    pausing: Option<(String, DateTime<Utc>)>,
    /// Last, so the proxies end before their runtime.
    proxies: ProxyRuntime,
}

impl Fleet {
    /// Notes a fault that can make a consumer run an attempt again, as of now.
    fn happened(&mut self, kind: &'static str) {
        self.events.push(Event {
            at: Utc::now(),
            kind,
        });
    }

    /// Starts 3 producers and 3 consumers on `config`, on the harness `ha` if given (else
    /// each through proxies of its own).
    pub async fn start(env: &TestEnv, config: &Path, ha: Option<Ha>) -> Self {
        let mut fleet = Self {
            env: env.clone(),
            ha,
            rabbit_down: None,
            redis_busy: false,
            config: config.to_owned(),
            members: Vec::new(),
            pending: Vec::new(),
            events: Vec::new(),
            faults: BTreeMap::new(),
            paused: Vec::new(),
            pausing: None,
            proxies: ProxyRuntime(None),
        };
        if fleet.ha.is_none() {
            fleet.proxies.0 = Some(
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name("chaos-proxies")
                    .enable_all()
                    .build()
                    .expect("the proxies' runtime"),
            );
        }
        for (role, n) in [("producer", 3), ("consumer", 3)] {
            for i in 1..=n {
                let links = match &fleet.proxies.0 {
                    Some(runtime) => Some(Links::start(runtime.handle()).await),
                    None => None,
                };
                fleet.members.push(Member {
                    role,
                    name: format!("{role}-{i}"),
                    pid: 0,
                    generation: 0,
                    up: false,
                    frozen: false,
                    links,
                    partitioned: false,
                });
                let index = fleet.members.len() - 1;
                fleet.spawn(index);
            }
        }
        fleet
    }

    fn spawn(&mut self, i: usize) {
        let m = &mut self.members[i];
        m.generation += 1;
        let mut cmd = cronq(&self.env, self.ha.as_ref());
        if let Some(links) = &m.links {
            cmd.env(Link::Redis.var(), &links.redis.1)
                .env(Link::Amqp.var(), &links.amqp.1);
        }
        cmd.env("RUST_LOG", RUST_LOG)
            .args(["--log-format", "json", "--config"])
            .arg(&self.config)
            .arg(m.role);
        if m.role == "consumer" {
            cmd.args([
                "--consumer-id",
                &m.name,
                "--lease",
                LEASE,
                "--concurrency",
                "8",
                "--grace",
                "10s",
            ]);
        }
        m.pid = self
            .env
            .spawn_command(&format!("{}.{}", m.name, m.generation), cmd);
        m.up = true;
        m.frozen = false;
    }

    /// Waits `wait`, bringing back what is due meanwhile.
    pub async fn tick(&mut self, wait: Duration) {
        let until = Instant::now() + wait;
        while Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(100)).await;
            self.due(false);
        }
    }

    /// Applies the pending restarts, SIGCONTs and resumes that are due (all, with `all`).
    fn due(&mut self, all: bool) {
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(at, _)| all || *at <= now);
        self.pending = later;
        for (_, what) in due {
            match what {
                Pending::Restart(i) => self.spawn(i),
                Pending::Cont(i) => {
                    self.env.signal(self.members[i].pid, Signal::SIGCONT);
                    self.members[i].frozen = false;
                    // The freeze's end is a fault time too: a consumer frozen between a
                    // claim and its handler's start runs it on waking, long after the
                    // reaper handed the occurrence to another consumer.
                    if self.members[i].role == "consumer" {
                        self.happened("freeze");
                    }
                }
                Pending::Resume(job) => {
                    let out = self.cli(&["resume", &job]);
                    if !out.status.success() && self.redis_busy {
                        // Sentinel may name no master while it switches: again shortly.
                        self.pending
                            .push((now + Duration::from_secs(1), Pending::Resume(job)));
                        continue;
                    }
                    assert!(out.status.success(), "resume {job}: {out:?}");
                    if let Some((job, from)) = self.pausing.take() {
                        self.paused.push((job, from, Utc::now()));
                    }
                }
                Pending::Restore(i, link) => {
                    let m = &mut self.members[i];
                    if let Some(links) = &m.links {
                        links.proxy(link).restore();
                    }
                    m.partitioned = false;
                    eprintln!("chaos: {}'s {link:?} link restored", m.name);
                    // The end of the cut is a fault time, as its start.
                    if let Some(kind) = cut_event(m.role, link) {
                        self.happened(kind);
                    }
                }
                Pending::Revive(n) => {
                    let ha = self.ha.as_ref().expect("a harness fault");
                    ha.run(&["upgrade", &n.to_string(), "revive"]);
                    self.rabbit_down = None;
                    eprintln!("chaos: RabbitMQ node {n} revived");
                }
                Pending::RabbitSettled => self.rabbit_down = None,
                Pending::HealPartition(n) => {
                    let ha = self.ha.as_ref().expect("a harness fault");
                    ha.heal();
                    self.rabbit_down = None;
                    self.redis_busy = false;
                    self.happened("connections");
                    eprintln!("chaos: RabbitMQ node {n} back in the cluster");
                }
                Pending::StartApp(n) => {
                    let ha = self.ha.as_ref().expect("a harness fault");
                    ha.ctl(n, &["start_app"]);
                    self.rabbit_down = None;
                    self.happened("connections");
                    eprintln!("chaos: RabbitMQ node {n} started again");
                }
                Pending::StartRedis(port) => {
                    let ha = self.ha.as_ref().expect("a harness fault");
                    ha.start_redis(port);
                    self.redis_busy = false;
                    eprintln!("chaos: Redis on {port} started again, as a replica");
                }
                Pending::RedisSettled => self.redis_busy = false,
            }
        }
    }

    /// Every process up and running, nothing paused, every harness node back.
    pub async fn heal(&mut self) {
        self.due(true);
        if let Some(ha) = &self.ha {
            ha.heal();
        }
        // A resume that could not be made while Redis switched is made now.
        for _ in 0..30 {
            if self.pending.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            self.due(true);
        }
        assert!(self.pending.is_empty(), "still to do after healing");
    }

    fn cli(&self, args: &[&str]) -> std::process::Output {
        cronq(&self.env, self.ha.as_ref())
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .output()
            .expect("run cronq")
    }

    /// A running member of `role` that `free` accepts, at random.
    fn pick(
        &self,
        rng: &mut impl Rng,
        role: &str,
        free: impl Fn(&Member) -> bool,
    ) -> Option<usize> {
        let ready: Vec<usize> = (0..self.members.len())
            .filter(|&i| {
                let m = &self.members[i];
                m.role == role && m.up && free(m)
            })
            .collect();
        (!ready.is_empty()).then(|| ready[rng.random_range(0..ready.len())])
    }

    /// Injects `fault`, `elapsed` into the soak; prints what it did.
    pub async fn inject(&mut self, fault: Fault, rng: &mut impl Rng, elapsed: Duration) {
        // A connection fault takes effect while it is injected (`scripts/ha` and
        // `rabbitmqctl` take seconds on a loaded machine): its start is a fault moment too.
        let began = Utc::now();
        let events = self.events.len();
        let what = match fault {
            Fault::KillConsumer | Fault::KillProducer => {
                let role = if fault == Fault::KillConsumer {
                    "consumer"
                } else {
                    "producer"
                };
                let Some(i) = self.pick(rng, role, |m| !m.frozen) else {
                    return;
                };
                let pid = self.members[i].pid;
                self.env.signal(pid, Signal::SIGKILL);
                self.env.wait(pid, Duration::from_secs(5));
                self.members[i].up = false;
                if role == "consumer" {
                    self.happened("kill");
                }
                let back = Duration::from_millis(rng.random_range(500..4000));
                self.pending
                    .push((Instant::now() + back, Pending::Restart(i)));
                format!("{} (pid {pid}), back in {back:?}", self.members[i].name)
            }
            Fault::FreezeConsumer | Fault::FreezeProducer => {
                let (role, range) = if fault == Fault::FreezeConsumer {
                    ("consumer", 4000..8000)
                } else {
                    ("producer", 3000..5000)
                };
                let Some(i) = self.pick(rng, role, |m| !m.frozen) else {
                    return;
                };
                self.env.signal(self.members[i].pid, Signal::SIGSTOP);
                self.members[i].frozen = true;
                if role == "consumer" {
                    self.happened("freeze");
                }
                let back = Duration::from_millis(rng.random_range(range));
                self.pending.push((Instant::now() + back, Pending::Cont(i)));
                format!("{} for {back:?}", self.members[i].name)
            }
            Fault::CloseAmqp => {
                let closed = match &self.ha {
                    None => close_amqp(&self.upstream_ports(Link::Amqp), |args| {
                        let out = Command::new("rabbitmqctl")
                            .args(args)
                            .output()
                            .expect("run rabbitmqctl");
                        out.status
                            .success()
                            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
                    }),
                    Some(ha) => (1..=3)
                        .filter(|n| self.rabbit_down != Some(*n))
                        .map(|n| {
                            let port = u16::try_from(5680 + n).expect("a harness port");
                            close_amqp(&local_ports(&self.pids(), port), |args| ha.try_ctl(n, args))
                        })
                        .sum(),
                };
                self.happened("connections");
                format!("{closed} connections")
            }
            Fault::KillRedisClients => {
                let (mut conn, ours) = match &self.ha {
                    None => (self.env.redis().await, self.upstream_ports(Link::Redis)),
                    // While a Redis fault is under way the master the sentinels name may
                    // be the one killed (not promoted over yet): nothing to connect to.
                    Some(_) if self.redis_busy => return,
                    Some(ha) => {
                        let port = ha.master_port();
                        (ha.node(port).await, local_ports(&self.pids(), port))
                    }
                };
                let killed = kill_redis_clients(&mut conn, &ours).await;
                self.happened("connections");
                format!("{killed} clients")
            }
            Fault::Reload => {
                let mut n = 0;
                for m in self.members.iter().filter(|m| m.role == "producer" && m.up) {
                    self.env.signal(m.pid, Signal::SIGHUP);
                    n += 1;
                }
                format!("{n} producers")
            }
            // A one-shot command needs Redis: while a Redis fault of the harness is under
            // way, Sentinel may name no master, and the command fails (as it should).
            Fault::Pause | Fault::Trigger | Fault::Backfill if self.redis_busy => return,
            Fault::Pause => {
                if self.pausing.is_some() {
                    return;
                }
                let job = PAUSABLE[rng.random_range(0..PAUSABLE.len())].to_owned();
                let out = self.cli(&["pause", &job, "--note", "chaos"]);
                assert!(out.status.success(), "pause {job}: {out:?}");
                self.pausing = Some((job.clone(), Utc::now()));
                let back = Duration::from_millis(rng.random_range(5000..15000));
                self.pending
                    .push((Instant::now() + back, Pending::Resume(job.clone())));
                format!("{job} for {back:?}")
            }
            Fault::Trigger => {
                let job = format!("fast-{}", rng.random_range(1..=8));
                let out = self.cli(&["trigger", &job]);
                assert!(out.status.success(), "trigger {job}: {out:?}");
                job
            }
            Fault::Backfill => {
                let now = Utc::now();
                let from = (now - chrono::Duration::seconds(30)).to_rfc3339();
                let to = (now - chrono::Duration::seconds(10)).to_rfc3339();
                let out = self.cli(&["backfill", "fast-1", "--from", &from, "--to", &to]);
                assert!(out.status.success(), "backfill: {out:?}");
                format!("fast-1 from {from} to {to}")
            }
            Fault::CutRedis | Fault::StallRedis | Fault::CutAmqp | Fault::StallAmqp => {
                let link = match fault {
                    Fault::CutRedis | Fault::StallRedis => Link::Redis,
                    _ => Link::Amqp,
                };
                let role = if rng.random_bool(0.5) {
                    "consumer"
                } else {
                    "producer"
                };
                let Some(i) = self.pick(rng, role, |m| !m.partitioned) else {
                    return;
                };
                let m = &mut self.members[i];
                let Some(links) = &m.links else {
                    return;
                };
                let proxy = links.proxy(link);
                if matches!(fault, Fault::CutRedis | Fault::CutAmqp) {
                    proxy.cut();
                } else {
                    proxy.stall();
                }
                m.partitioned = true;
                let name = m.name.clone();
                if let Some(kind) = cut_event(role, link) {
                    self.happened(kind);
                }
                let back = Duration::from_millis(rng.random_range(1000..8000));
                self.pending
                    .push((Instant::now() + back, Pending::Restore(i, link)));
                format!("{name} for {back:?}")
            }
            Fault::DrainRabbitNode => {
                let Some(ha) = self.ha.as_ref().filter(|_| self.rabbit_down.is_none()) else {
                    return;
                };
                let n = rng.random_range(1..=3);
                ha.run(&["upgrade", &n.to_string(), "drain"]);
                let back = self.node_down(n, Pending::Revive(n), rng);
                format!("node {n}, revive in {back:?}")
            }
            Fault::MoveQueueLeader => {
                let Some(ha) = self.ha.as_ref().filter(|_| self.rabbit_down.is_none()) else {
                    return;
                };
                let queue = format!(
                    "{}.q.{}",
                    self.env.namespace,
                    if rng.random_bool(0.5) {
                        "default"
                    } else {
                        "second"
                    }
                );
                let Some(from) = ha.queue_leader(&queue) else {
                    return;
                };
                let to = (from + rng.random_range(0..2)) % 3 + 1;
                let out = ha.transfer_leadership(&queue, from, to);
                self.rabbit_down = Some(from);
                self.pending.push((
                    Instant::now() + Duration::from_secs(5),
                    Pending::RabbitSettled,
                ));
                format!(
                    "{queue} from node {from} to {to}: {}",
                    out.as_deref().map_or("failed", str::trim)
                )
            }
            Fault::PartitionRabbitNode => {
                let Some(ha) = self
                    .ha
                    .as_ref()
                    .filter(|_| self.rabbit_down.is_none() && !self.redis_busy)
                else {
                    return;
                };
                let n = rng.random_range(1..=3);
                ha.run(&["partition-rabbit", &n.to_string()]);
                // Healing brings every node back, Redis's too: no Redis fault meanwhile.
                self.rabbit_down = Some(n);
                self.redis_busy = true;
                self.happened("connections");
                let back = Duration::from_millis(rng.random_range(8000..20000));
                self.pending
                    .push((Instant::now() + back, Pending::HealPartition(n)));
                format!("node {n}, healed in {back:?}")
            }
            Fault::StopRabbitNode => {
                let Some(ha) = self.ha.as_ref().filter(|_| self.rabbit_down.is_none()) else {
                    return;
                };
                let n = rng.random_range(1..=3);
                ha.ctl(n, &["stop_app"]);
                let back = self.node_down(n, Pending::StartApp(n), rng);
                format!("node {n}, start_app in {back:?}")
            }
            Fault::KillRedisMaster => {
                let Some(ha) = self.ha.as_ref().filter(|_| !self.redis_busy) else {
                    return;
                };
                let port = ha.master_port();
                ha.kill_redis(port);
                self.redis_busy = true;
                self.happened("connections");
                // Sentinel promotes a replica in about 3.3 s; the old master comes back as
                // a replica of the new one.
                let back = Duration::from_millis(rng.random_range(8000..15000));
                self.pending
                    .push((Instant::now() + back, Pending::StartRedis(port)));
                format!("master on {port}, back in {back:?}")
            }
            Fault::SentinelFailover => {
                let Some(ha) = self.ha.as_ref().filter(|_| !self.redis_busy) else {
                    return;
                };
                let from = ha.master_port();
                ha.failover().await;
                self.redis_busy = true;
                self.happened("connections");
                // The old master is demoted about 10 s later.
                self.pending.push((
                    Instant::now() + Duration::from_secs(15),
                    Pending::RedisSettled,
                ));
                format!("from the master on {from}")
            }
        };
        if self.events[events..]
            .iter()
            .any(|e| e.kind == "connections")
        {
            self.events.insert(
                events,
                Event {
                    at: began,
                    kind: "connections",
                },
            );
        }
        *self.faults.entry(fault.name()).or_insert(0) += 1;
        eprintln!(
            "chaos: t+{:.1}s ({}) {}: {what}",
            elapsed.as_secs_f64(),
            began.format("%H:%M:%S%.3f"),
            fault.name()
        );
    }

    /// RabbitMQ node `n` out of service from now on (its clients' connections drop), and
    /// `back` due 5-15 s later to return it; returns how much later.
    fn node_down(&mut self, n: usize, back: Pending, rng: &mut impl Rng) -> Duration {
        self.rabbit_down = Some(n);
        self.happened("connections");
        let after = Duration::from_millis(rng.random_range(5000..15000));
        self.pending.push((Instant::now() + after, back));
        after
    }

    /// The local ports of the connections the members' proxies of `link` hold to the
    /// service.
    fn upstream_ports(&self, link: Link) -> Vec<u16> {
        self.members
            .iter()
            .filter_map(|m| m.links.as_ref())
            .flat_map(|l| l.proxy(link).upstream_ports())
            .collect()
    }

    fn pids(&self) -> Vec<u32> {
        self.members
            .iter()
            .filter(|m| m.up)
            .map(|m| m.pid)
            .collect()
    }

    /// Sends `sig` to every running member of `role` and waits for them to exit.
    pub fn stop(&mut self, sig: Signal, role: &str) {
        for m in self.members.iter().filter(|m| m.role == role && m.up) {
            self.env.signal(m.pid, sig);
        }
        for m in self.members.iter_mut().filter(|m| m.role == role && m.up) {
            let code = self.env.wait(m.pid, Duration::from_secs(45));
            assert!(code.is_some(), "{} (pid {}) did not exit", m.name, m.pid);
            m.up = false;
        }
    }

    /// The processes still running whose command line names the soak's directory (cronq
    /// processes name its config, handlers its log).
    pub fn left_running(&self, env: &TestEnv) -> Vec<String> {
        let dir = env.dir.to_string_lossy().into_owned();
        let me = std::process::id();
        let mut left = Vec::new();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if pid == me {
                continue;
            }
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
                continue;
            };
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(&dir) {
                left.push(format!("{pid}: {cmdline}"));
            }
        }
        left
    }
}

/// The local ports of the TCP connections of `pids` to port `port` (`ss -tnp`).
fn local_ports(pids: &[u32], port: u16) -> Vec<u16> {
    let out = Command::new("ss")
        .args(["-tnpH", "state", "established"])
        .arg(format!("( dport = :{port} )"))
        .output()
        .expect("run ss (iproute2)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| pids.iter().any(|p| l.contains(&format!("pid={p},"))))
        .filter_map(|l| {
            let local = l.split_whitespace().nth(2)?;
            local.rsplit(':').next()?.parse().ok()
        })
        .collect()
}

/// Closes the AMQP connections from the local ports `ours` to a RabbitMQ node, through its
/// `rabbitmqctl` (`ctl`: its stdout, `None` when it failed); returns how many.
fn close_amqp(ours: &[u16], ctl: impl Fn(&[&str]) -> Option<String>) -> usize {
    if ours.is_empty() {
        return 0;
    }
    let listed = ctl(&[
        "list_connections",
        "pid",
        "peer_port",
        "-q",
        "--no-table-headers",
    ])
    .unwrap_or_default();
    let mut closed = 0;
    for line in listed.lines() {
        let mut parts = line.split_whitespace();
        let (Some(conn), Some(port)) = (parts.next(), parts.next()) else {
            continue;
        };
        if port.parse().is_ok_and(|p: u16| ours.contains(&p))
            && ctl(&["close_connection", conn, "chaos soak"]).is_some()
        {
            closed += 1;
        }
    }
    closed
}

/// Kills the clients from the local ports `ours` on the Redis `conn` is connected to
/// (`CLIENT KILL ID`); returns how many.
async fn kill_redis_clients(conn: &mut redis::aio::MultiplexedConnection, ours: &[u16]) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(conn)
        .await
        .expect("CLIENT LIST");
    let mut killed = 0;
    for line in list.lines() {
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|f| f.strip_prefix(name))
                .map(str::to_owned)
        };
        let (Some(id), Some(addr)) = (field("id="), field("addr=")) else {
            continue;
        };
        let port = addr.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
        if port.is_some_and(|p| ours.contains(&p)) {
            let n: redis::RedisResult<i64> = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("ID")
                .arg(&id)
                .query_async(conn)
                .await;
            if n.is_ok_and(|n| n > 0) {
                killed += 1;
            }
        }
    }
    killed
}
