//! The command line: one binary, one subcommand per operation (`cmd/` has one file per
//! subcommand; the operations are described in `docs/operations.md`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// The help heading of the options that say where RabbitMQ and Redis are, and the
/// namespace on them; each command's own options come first, under "Options".
const CONNECTIONS: &str = "Connections (RabbitMQ, Redis)";
/// The help heading of the signing and TLS options.
const SECURITY: &str = "Signing and TLS";
/// The help heading of a standalone's data file options.
const DATA_FILE: &str = "Standalone data file";

/// Distributed cron: each scheduled occurrence runs once across the whole fleet.
#[derive(Debug, Parser)]
#[command(name = "cronq", version, propagate_version = true)]
pub struct Cli {
    /// The config file (TOML). The operations commands read the config the standalone or
    /// the fleet's leader recorded instead, and warn when this one differs.
    #[arg(long, global = true, env = "CRONQ_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Human)]
    pub log_format: LogFormat,

    /// RabbitMQ URL (amqp:// or amqps://), or the URLs of a cluster's nodes separated by
    /// commas (see docs/ha.md).
    #[arg(long, global = true, help_heading = CONNECTIONS, env = "CRONQ_AMQP_URL", default_value = cronq_shared::endpoints::DEFAULT_AMQP_URL, hide_env_values = true, hide_default_value = true)]
    pub amqp_url: String,

    /// Members of each quorum queue a process declares (x-quorum-initial-group-size; a
    /// cluster of fewer nodes gets one per node).
    #[arg(long, global = true, help_heading = CONNECTIONS, env = "CRONQ_AMQP_QUORUM_SIZE", default_value_t = cronq_shared::endpoints::DEFAULT_QUORUM_SIZE, value_parser = clap::value_parser!(u16).range(1..))]
    pub amqp_quorum_size: u16,

    /// Redis URL: redis:// or rediss:// for one server, or for the master Redis Sentinel
    /// names redis+sentinel://HOST:PORT,HOST:PORT/MASTER (USER:PASSWORD@ before the hosts and
    /// /DB after the master are optional; rediss+sentinel:// for TLS; see docs/ha.md).
    #[arg(long, global = true, help_heading = CONNECTIONS, env = "CRONQ_REDIS_URL", default_value = cronq_shared::endpoints::DEFAULT_REDIS_URL, hide_env_values = true, hide_default_value = true)]
    pub redis_url: String,

    /// How many Redis replicas must acknowledge each write the guarantees rest on before it
    /// counts (0: none; see docs/operations.md).
    #[arg(
        long,
        global = true,
        help_heading = CONNECTIONS,
        env = "CRONQ_REDIS_MIN_REPLICAS",
        default_value_t = 0,
        value_name = "N"
    )]
    pub redis_min_replicas: u32,

    /// A file of message signing keys, one ID:SECRET per line, the first signing (instead
    /// of the variable CRONQ_SIGNING_KEY; see docs/security.md).
    #[arg(
        long,
        global = true,
        help_heading = SECURITY,
        env = "CRONQ_SIGNING_KEY_FILE",
        value_name = "FILE"
    )]
    pub signing_key_file: Option<PathBuf>,

    /// A PEM file of the CA certificates trusted for amqps:// and rediss:// (see
    /// docs/config.md, "TLS").
    #[arg(long, global = true,
        help_heading = SECURITY, env = "CRONQ_TLS_CA_FILE", value_name = "FILE")]
    pub tls_ca_file: Option<PathBuf>,

    /// The client certificate (PEM) given to a TLS server that asks for one; with
    /// --tls-key-file.
    #[arg(long, global = true,
        help_heading = SECURITY, env = "CRONQ_TLS_CERT_FILE", value_name = "FILE")]
    pub tls_cert_file: Option<PathBuf>,

    /// The private key (PEM) of --tls-cert-file.
    #[arg(long, global = true,
        help_heading = SECURITY, env = "CRONQ_TLS_KEY_FILE", value_name = "FILE")]
    pub tls_key_file: Option<PathBuf>,

    /// Prefix of every exchange, queue and Redis key: [a-z0-9_.-]{1,64}.
    #[arg(long, global = true, help_heading = CONNECTIONS, env = "CRONQ_NAMESPACE", default_value = "cronq")]
    pub namespace: String,

    /// A standalone's data file (SQLite). `standalone` runs on it (default `cronq.db` in
    /// the working directory; `:memory:` keeps everything in the process); the operations
    /// commands then work on it instead of RabbitMQ and Redis.
    #[arg(long, global = true,
        help_heading = DATA_FILE, env = "CRONQ_DATA", value_name = "PATH")]
    pub data: Option<PathBuf>,

    /// How a data file's commits reach the disk (see docs/standalone.md).
    #[arg(long, global = true,
        help_heading = DATA_FILE, env = "CRONQ_DATA_SYNC", value_enum, default_value_t = DataSync::Normal)]
    pub data_sync: DataSync,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Human,
    /// One JSON object per line.
    Json,
}

/// SQLite's `synchronous` for a data file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DataSync {
    /// A killed process loses nothing; an OS crash or a power cut may lose the last
    /// commits.
    Normal,
    /// Every commit is synced to disk: nothing committed is lost on a power cut (slower).
    Full,
}

/// The options of the fleet's services (RabbitMQ, Redis, their TLS and the namespace),
/// which a standalone does not use: its help does not list them.
const FLEET_ONLY: &[&str] = &[
    "amqp_url",
    "amqp_quorum_size",
    "redis_url",
    "redis_min_replicas",
    "tls_ca_file",
    "tls_cert_file",
    "tls_key_file",
    "namespace",
];
/// The data file's options, which a producer and a consumer do not use.
const DATA_FILE_ONLY: &[&str] = &["data", "data_sync"];

impl Cli {
    /// The command line as its help shows it: the global options are given to every
    /// subcommand, but a subcommand's help hides those it does not use (a standalone's the
    /// fleet's connections, a producer's and a consumer's the data file). Parsing is
    /// unchanged: a hidden option is still accepted.
    pub fn shaped() -> clap::Command {
        let command = <Self as clap::CommandFactory>::command();
        // A subcommand that already has an argument of a global's id keeps its own when
        // clap propagates the globals: give it a hidden copy (still global, so its value
        // reaches `Cli` as any global's does).
        let hidden: Vec<clap::Arg> = command
            .get_arguments()
            .filter(|a| a.is_global_set())
            .map(|a| a.clone().hide(true))
            .collect();
        let hide = |sub: clap::Command, ids: &[&str]| {
            let copies = hidden
                .iter()
                .filter(|a| ids.contains(&a.get_id().as_str()))
                .cloned();
            sub.args(copies)
        };
        command
            .mut_subcommand("standalone", |s| hide(s, FLEET_ONLY))
            .mut_subcommand("producer", |s| hide(s, DATA_FILE_ONLY))
            .mut_subcommand("consumer", |s| hide(s, DATA_FILE_ONLY))
    }

    /// Parses the process's arguments with [`Self::shaped`]; exits 2 on a usage error
    /// (0 after `--help` or `--version`), as clap does.
    pub fn parse_shaped() -> Self {
        let matches = Self::shaped().get_matches();
        <Self as clap::FromArgMatches>::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }
}

impl From<DataSync> for cronq_backends::Sync {
    fn from(sync: DataSync) -> Self {
        match sync {
            DataSync::Normal => Self::Normal,
            DataSync::Full => Self::Full,
        }
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate the config: exit 0, or exit 2 with every problem listed.
    #[command(
        after_help = "Examples:\n  cronq check --config cronq.toml\n  CRONQ_CONFIG=cronq.toml cronq check"
    )]
    Check,
    /// Preview the next fire times per job, in the job's zone and UTC.
    #[command(
        after_help = "Examples:\n  cronq next --config cronq.toml --count 3\n  cronq next --config cronq.toml --job nightly-report --from 2027-03-13T00:00:00Z --json"
    )]
    Next(NextArgs),
    /// Join leader election; the leader publishes occurrences.
    #[command(
        after_help = "Examples:\n  cronq producer --config cronq.toml --admin-addr 0.0.0.0:9090\n  CRONQ_REDIS_URL=redis+sentinel://s1:26379,s2:26379/cronq cronq producer --config cronq.toml"
    )]
    Producer(ProducerArgs),
    /// Execute occurrences from the queues.
    #[command(
        after_help = "Examples:\n  cronq consumer --config cronq.toml --concurrency 8\n  cronq consumer --config cronq.toml --queues reports --grace 5m"
    )]
    Consumer(ConsumerArgs),
    /// Producer and consumer in one process on one SQLite file: no RabbitMQ, no Redis.
    #[command(
        after_help = "Examples:\n  cronq standalone --config examples/cronq.example.toml\n  cronq standalone --config cronq.toml --data /var/lib/cronq/cronq.db --dashboard-addr 127.0.0.1:8080"
    )]
    Standalone(StandaloneArgs),
    /// The web dashboard and its JSON API (read-only unless an admin token is configured).
    #[command(
        after_help = "Examples:\n  cronq dashboard --config cronq.toml --addr 127.0.0.1:8080\n  CRONQ_DASHBOARD_TOKEN=... cronq dashboard --config cronq.toml --data cronq.db"
    )]
    Dashboard(DashboardArgs),
    /// Each job (the file's, then the runtime jobs): schedule, zone, next fire, paused, last
    /// outcome, whether a live consumer serves it.
    #[command(after_help = "Examples:\n  cronq jobs\n  cronq jobs --data cronq.db --json")]
    Jobs(JsonArg),
    /// Run history, newest first.
    #[command(
        after_help = "Examples:\n  cronq runs --job nightly-report --limit 20\n  cronq runs --data cronq.db --json"
    )]
    Runs(RunsArgs),
    /// Stop publishing a job, fleet-wide.
    #[command(
        after_help = "Examples:\n  cronq pause nightly-report --note \"orders API down, INC-1234\""
    )]
    Pause(PauseArgs),
    /// Restart publishing a paused job (no catch-up: use backfill).
    #[command(after_help = "Examples:\n  cronq resume nightly-report")]
    Resume(JobArg),
    /// Run one occurrence now (or once at --at), under its own key JOB@manual-ID.
    #[command(
        after_help = "Examples:\n  cronq trigger nightly-report\n  cronq trigger nightly-report --payload '{\"region\": \"eu\"}'\n  cronq trigger nightly-report --at 2026-12-24T10:00:00+01:00 --data cronq.db"
    )]
    Trigger(TriggerArgs),
    /// Publish every occurrence with from <= t <= to under its normal key.
    #[command(
        after_help = "Examples:\n  cronq backfill nightly-report --from 2026-11-28T00:00:00Z --to 2026-11-29T23:59:59Z"
    )]
    Backfill(BackfillArgs),
    /// Stop a running occurrence within about a second, or a waiting one before it starts;
    /// recorded `cancelled` with who asked.
    #[command(
        after_help = "Exit status: 0 cancelled (or the running attempt asked to stop), 1 the occurrence already ended (or an error), 2 no such occurrence, or a usage error.\n\nExamples:\n  cronq cancel nightly-report@2026-11-29T19:30:00Z\n  cronq cancel nightly-report@manual-01JDX3 --data cronq.db --json"
    )]
    Cancel(CancelArgs),
    /// Create, change and delete jobs at runtime, fleet-wide, without a restart.
    #[command(subcommand)]
    Job(JobCommand),
    /// Inspect or replay the dead-letter queue.
    #[command(subcommand)]
    Dlq(DlqCommand),
    /// The operators' actions (job changes, pause, trigger, replay, log-ins), newest first.
    #[command(
        after_help = "Examples:\n  cronq audit\n  cronq audit --job nightly-report --since 24h --json"
    )]
    Audit(AuditArgs),
    /// Account for every occurrence the schedules expected in a range: its terminal state,
    /// and every gap (never published, no terminal state, succeeded twice, a dead letter
    /// without a failed record); exit 1 when there is any.
    #[command(
        after_help = "Exit status: 0 every expected occurrence is accounted for, 1 a gap (or an error), 2 a usage error.\n\nExamples:\n  cronq verify --from 2026-11-29T00:00:00Z --to 2026-11-30T00:00:00Z\n  cronq verify --job nightly-report --from 2026-11-01T00:00:00Z --to 2026-11-30T00:00:00Z --json\n  cronq verify --from 2026-11-29T10:00:00Z --to 2026-11-29T11:00:00Z --data cronq.db"
    )]
    Verify(VerifyArgs),
    /// What a new config changes in the next hours against what runs now: per job added,
    /// removed or changed, the occurrences that appear, disappear or move; exit 0 when
    /// nothing changes, 3 when something does.
    #[command(
        after_help = "Exit status: 0 no job changes, 3 some job changes, 1 an error, 2 a usage or config error.\n\nExamples:\n  cronq plan --config new.toml\n  cronq plan --config new.toml --data cronq.db --hours 48\n  cronq plan --config new.toml --against cronq.toml --json"
    )]
    Plan(PlanArgs),
    /// GET an admin URL and exit 0 when it answers 2xx (container health checks).
    #[command(after_help = "Examples:\n  cronq probe http://127.0.0.1:9090/readyz")]
    Probe(ProbeArgs),
    /// Print a shell completion script (e.g. `cronq completions bash > /etc/bash_completion.d/cronq`).
    Completions(CompletionsArgs),
    /// Print the man page (roff) of cronq and its subcommands, or write one file per page.
    Man(ManArgs),
    /// Print the version (as `--version`).
    Version,
}

/// `cronq completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `cronq man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write `cronq.1` and one `cronq-SUBCOMMAND.1` per subcommand into this directory
    /// instead of printing `cronq.1`.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// `cronq probe`.
#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// The URL, such as http://127.0.0.1:9090/healthz.
    pub url: String,
}

/// `--json`.
#[derive(Debug, Args)]
pub struct JsonArg {
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `cronq next`.
#[derive(Debug, Args)]
pub struct NextArgs {
    /// Only this job.
    #[arg(long)]
    pub job: Option<String>,
    /// How many fire times per job.
    #[arg(long, default_value_t = 5)]
    pub count: usize,
    /// Start after this instant (RFC 3339); default now.
    #[arg(long)]
    pub from: Option<String>,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Flags of every long-running command.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Serve /metrics, /healthz and /readyz here (port 0 = off).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub admin_addr: SocketAddr,
}

/// `cronq producer`.
#[derive(Debug, Args)]
pub struct ProducerArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub serve: ServeArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub reconcile: ReconcileArgs,
}

/// The leader's continuous reconciliation (docs/observability.md, "Verifying what ran");
/// tests shorten it.
#[derive(Debug, Args)]
pub struct ReconcileArgs {
    /// How often the leader accounts for the trailing window.
    #[arg(long, env = "CRONQ_RECONCILE_EVERY", default_value = "60s", value_parser = humantime::parse_duration, hide = true)]
    pub reconcile_every: Duration,
    /// How far back the trailing window starts.
    #[arg(long, env = "CRONQ_RECONCILE_WINDOW", default_value = "1h", value_parser = humantime::parse_duration, hide = true)]
    pub reconcile_window: Duration,
    /// How far back it ends (also each occurrence's grace).
    #[arg(long, env = "CRONQ_RECONCILE_LAG", default_value = "2m", value_parser = humantime::parse_duration, hide = true)]
    pub reconcile_lag: Duration,
    /// How often the leader reads the whole run history again (between, it reads what was
    /// appended).
    #[arg(long, env = "CRONQ_RECONCILE_RESYNC", default_value = "1h", value_parser = humantime::parse_duration, hide = true)]
    pub reconcile_resync: Duration,
}

impl ReconcileArgs {
    /// As the producer's check takes it.
    pub fn trailing(&self) -> cronq_producer::accounting_check::Trailing {
        cronq_producer::accounting_check::Trailing {
            every: self.reconcile_every,
            window: self.reconcile_window,
            lag: self.reconcile_lag,
            resync: self.reconcile_resync,
        }
    }
}

/// `cronq consumer`.
#[derive(Debug, Args)]
pub struct ConsumerArgs {
    /// Serve only these queues (comma-separated); default every queue in the config.
    #[arg(long, value_delimiter = ',')]
    pub queues: Vec<String>,
    /// How many attempts run at once (also the AMQP prefetch).
    #[arg(long, default_value_t = 4)]
    pub concurrency: u16,
    /// The async runtime's worker threads [default: 1, or tokio's TOKIO_WORKER_THREADS
    /// when set]. One is the cheapest per occurrence; raise it only when one core is not
    /// enough for this consumer's own work (docs/consumer.md).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,
    /// How long running attempts may finish after SIGTERM.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub grace: Duration,
    /// A name for this consumer in the run history (default: host and pid).
    #[arg(long)]
    pub consumer_id: Option<String>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub output: OutputArgs,
    /// Execution lease: a claim lapses this long after its consumer's last heartbeat, and
    /// the occurrence runs again elsewhere (tests use short leases).
    #[arg(long, env = "CRONQ_LEASE", default_value = "30s", value_parser = humantime::parse_duration, hide = true)]
    pub lease: Duration,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub serve: ServeArgs,
}

/// `cronq standalone`.
#[derive(Debug, Args)]
pub struct StandaloneArgs {
    /// How long running attempts may finish after SIGTERM.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub grace: Duration,
    /// How many attempts run at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: u16,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub output: OutputArgs,
    /// Execution lease: an attempt of a killed standalone runs again this long after its
    /// last heartbeat (tests use short leases).
    #[arg(long, env = "CRONQ_LEASE", default_value = "30s", value_parser = humantime::parse_duration, hide = true)]
    pub lease: Duration,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub serve: ServeArgs,
    /// Also serve the web dashboard here (as `cronq dashboard --data` does).
    #[arg(long, value_name = "ADDR")]
    pub dashboard_addr: Option<SocketAddr>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub reconcile: ReconcileArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub token: DashboardToken,
}

/// How much of each attempt's output is kept with its run.
#[derive(Debug, Args)]
pub struct OutputArgs {
    /// Keep the last this many bytes of each command's stdout and of its stderr with its
    /// run (`cronq runs --output`); 64KiB by default, 0 keeps none. K/KiB and M/MiB suffixes
    /// are taken.
    #[arg(long, env = "CRONQ_OUTPUT_LIMIT", default_value = "64KiB", value_name = "BYTES", value_parser = parse_bytes)]
    pub output_limit: usize,
}

/// A byte count: a number, optionally followed by K, KiB, M or MiB (powers of 1024).
fn parse_bytes(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let number: usize = number
        .parse()
        .map_err(|_| format!("{text:?} is not a byte count such as 65536, 64KiB or 1MiB"))?;
    let scale = match unit.trim() {
        "" | "B" => 1,
        "K" | "KiB" | "k" | "kB" | "KB" => 1024,
        "M" | "MiB" | "MB" => 1024 * 1024,
        other => return Err(format!("unknown unit {other:?}: use K/KiB or M/MiB")),
    };
    number
        .checked_mul(scale)
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// The tokens of the dashboard and its API (docs/security.md, "Roles and tokens").
#[derive(Debug, Args)]
pub struct DashboardToken {
    /// A file holding the dashboard's admin token (instead of the variable
    /// CRONQ_DASHBOARD_TOKEN): one token named `admin` with the role admin. Without a token
    /// the dashboard is read-only.
    #[arg(long, env = "CRONQ_DASHBOARD_TOKEN_FILE", value_name = "FILE")]
    pub dashboard_token_file: Option<PathBuf>,
    /// A file of named tokens, one `NAME ROLE SECRET` a line (ROLE: viewer, operator or
    /// admin; `#` starts a comment). Not together with an admin token.
    #[arg(long, env = "CRONQ_TOKENS_FILE", value_name = "FILE")]
    pub tokens_file: Option<PathBuf>,
}

/// `cronq dashboard`.
#[derive(Debug, Args)]
pub struct DashboardArgs {
    /// Serve the dashboard here (loopback by default: see docs/dashboard.md before
    /// opening it wider).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub token: DashboardToken,
}

/// `cronq audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Only this job's actions.
    #[arg(long)]
    pub job: Option<String>,
    /// Only actions since then: an RFC 3339 instant, or a duration such as `2h` (ago).
    #[arg(long, value_name = "T")]
    pub since: Option<String>,
    /// At most this many entries.
    #[arg(long, default_value_t = cronq_shared::audit::DEFAULT_LIMIT)]
    pub limit: usize,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `cronq verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The range's first instant (RFC 3339), inclusive.
    #[arg(long, value_name = "T")]
    pub from: String,
    /// The range's last instant (RFC 3339), inclusive.
    #[arg(long, value_name = "T")]
    pub to: String,
    /// Only this job.
    #[arg(long)]
    pub job: Option<String>,
    /// How long after an occurrence could have ended (its jitter and timeout, or its
    /// retry's) it is judged; before that it is pending, not a gap.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub grace: Duration,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `cronq plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Compare with this config file instead of what the target (the fleet's store, or
    /// `--data`) runs.
    #[arg(long, value_name = "OLD")]
    pub against: Option<PathBuf>,
    /// How many hours ahead to look.
    #[arg(long, default_value_t = 24)]
    pub hours: u32,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `cronq runs`.
#[derive(Debug, Args)]
pub struct RunsArgs {
    /// Only this job.
    #[arg(long, conflicts_with = "key")]
    pub job: Option<String>,
    /// Only this occurrence (JOB@SCHEDULED_UTC or JOB@manual-ID), every attempt.
    #[arg(long, value_name = "KEY")]
    pub key: Option<String>,
    /// Also show what each attempt printed (a command's stdout and stderr tails) or was
    /// answered (an http handler's status and body head), as kept with the run.
    #[arg(long)]
    pub output: bool,
    /// At most this many runs.
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `cronq job`: runtime jobs (docs/runtime-jobs.md).
#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// Create or update the `[[job]]` tables of a file (each names its handler).
    #[command(
        after_help = "Examples:\n  cronq job apply -f report-eu.toml --config cronq.toml\n  cronq job apply -f jobs.toml --allow-unknown-handler --data cronq.db --config cronq.toml"
    )]
    Apply(JobApplyArgs),
    /// A runtime job's current definition and revision.
    #[command(
        after_help = "Examples:\n  cronq job get report-eu --config cronq.toml\n  cronq job get report-eu --json --config cronq.toml"
    )]
    Get(JobGetArgs),
    /// Delete a runtime job: its queued occurrences are not run.
    #[command(after_help = "Examples:\n  cronq job delete report-eu --config cronq.toml")]
    Delete(JobArg),
    /// Every revision of a runtime job: who, when, what changed.
    #[command(after_help = "Examples:\n  cronq job history report-eu --config cronq.toml")]
    History(JobArg),
}

/// `cronq job apply`.
#[derive(Debug, Args)]
pub struct JobApplyArgs {
    /// The file of `[[job]]` tables.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: PathBuf,
    /// Accept a handler no live consumer offers (nor, while none runs, the config's
    /// [handlers.NAME]): a consumer not running yet registers it in Rust.
    #[arg(long)]
    pub allow_unknown_handler: bool,
}

/// `cronq job get`.
#[derive(Debug, Args)]
pub struct JobGetArgs {
    /// The job.
    pub job: String,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

/// A job name.
#[derive(Debug, Args)]
pub struct JobArg {
    /// The job.
    pub job: String,
}

/// `cronq pause`.
#[derive(Debug, Args)]
pub struct PauseArgs {
    /// The job.
    pub job: String,
    /// Why, shown by `cronq jobs`.
    #[arg(long)]
    pub note: Option<String>,
}

/// `cronq trigger`.
#[derive(Debug, Args)]
pub struct TriggerArgs {
    /// The job.
    pub job: String,
    /// JSON that replaces the configured payload.
    #[arg(long)]
    pub payload: Option<String>,
    /// Run it once at this future instant (RFC 3339) instead of now; the request waits in
    /// the control store, so it survives a leader failover.
    #[arg(long)]
    pub at: Option<String>,
}

/// `cronq cancel`.
#[derive(Debug, Args)]
pub struct CancelArgs {
    /// The occurrence key, JOB@SCHEDULED_UTC or JOB@manual-ID (as `cronq runs` lists it).
    pub key: String,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `cronq backfill`.
#[derive(Debug, Args)]
pub struct BackfillArgs {
    /// The job.
    pub job: String,
    /// First instant (RFC 3339), inclusive.
    #[arg(long)]
    pub from: String,
    /// Last instant (RFC 3339), inclusive.
    #[arg(long)]
    pub to: String,
    /// Allow more than 10,000 occurrences.
    #[arg(long)]
    pub yes: bool,
}

/// `cronq dlq`.
#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// Every dead-lettered occurrence, without consuming the queue.
    #[command(after_help = "Examples:\n  cronq dlq list\n  cronq dlq list --data cronq.db --json")]
    List(JsonArg),
    /// Send dead-lettered occurrences back for execution.
    #[command(
        after_help = "Examples:\n  cronq dlq replay --job sync-orders --dry-run --config cronq.toml\n  cronq dlq replay --key sync-orders@2026-11-30T02:47:57Z --config cronq.toml"
    )]
    Replay(ReplayArgs),
}

/// `cronq dlq replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Only this job's letters.
    #[arg(long)]
    pub job: Option<String>,
    /// Only this key.
    #[arg(long)]
    pub key: Option<String>,
    /// Every letter.
    #[arg(long)]
    pub all: bool,
    /// Show what would be replayed; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[cfg(test)]
mod tests {
    //! The shipped `docker-compose.yml` must stay in step with this command line and with
    //! the example config it mounts (no Docker engine is needed to check that).

    use std::path::Path;

    use clap::Parser as _;

    use super::Cli;

    /// A service of the compose file: its name, whether it runs cronq, its command.
    struct Service {
        name: String,
        runs_cronq: bool,
        command: Option<Vec<String>>,
    }

    fn compose() -> String {
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docker-compose.yml"))
            .expect("docker-compose.yml is shipped at the repository root")
    }

    /// A JSON-style flow sequence (`["a", "b"]`) after `key:` on a line.
    fn flow_list(line: &str, key: &str) -> Option<Vec<String>> {
        let rest = line.trim().strip_prefix(key)?.trim();
        serde_json::from_str(rest).ok()
    }

    fn services(text: &str) -> Vec<Service> {
        let mut out: Vec<Service> = Vec::new();
        let mut in_services = false;
        for line in text.lines() {
            if !line.starts_with(' ') && !line.trim().is_empty() {
                in_services = line.trim_end() == "services:";
                continue;
            }
            if !in_services {
                continue;
            }
            let indent = line.len() - line.trim_start().len();
            if indent == 2 && line.trim_end().ends_with(':') {
                out.push(Service {
                    name: line.trim().trim_end_matches(':').to_owned(),
                    runs_cronq: false,
                    command: None,
                });
            } else if let Some(service) = out.last_mut() {
                if line.trim() == "<<: *cronq" {
                    service.runs_cronq = true;
                }
                if let Some(cmd) = flow_list(line, "command:") {
                    service.command = Some(cmd);
                }
            }
        }
        out
    }

    #[test]
    fn byte_counts_take_binary_suffixes() {
        assert_eq!(super::parse_bytes("65536"), Ok(65536));
        assert_eq!(super::parse_bytes("64KiB"), Ok(65536));
        assert_eq!(super::parse_bytes("1M"), Ok(1 << 20));
        assert_eq!(super::parse_bytes("0"), Ok(0));
        assert!(super::parse_bytes("lots").is_err());
        assert!(super::parse_bytes("5 GiB").is_err());
    }

    #[test]
    fn an_option_hidden_from_a_subcommands_help_still_reaches_the_cli() {
        let parse = |argv: &[&str]| {
            let matches = Cli::shaped()
                .try_get_matches_from(argv)
                .expect("the command line parses");
            <Cli as clap::FromArgMatches>::from_arg_matches(&matches).expect("a Cli")
        };
        let cli = parse(&[
            "cronq",
            "standalone",
            "--namespace",
            "ns1",
            "--amqp-url",
            "amqp://h",
        ]);
        assert_eq!(
            (cli.namespace.as_str(), cli.amqp_url.as_str()),
            ("ns1", "amqp://h")
        );
        let cli = parse(&["cronq", "producer", "--data", "x.db"]);
        assert_eq!(cli.data.as_deref(), Some(Path::new("x.db")));
        let cli = parse(&["cronq", "--namespace", "ns2", "standalone"]);
        assert_eq!(cli.namespace, "ns2");
    }

    #[test]
    fn every_cronq_command_line_in_the_compose_file_parses() {
        let text = compose();
        let services = services(&text);
        let cronq: Vec<&Service> = services.iter().filter(|s| s.runs_cronq).collect();
        let names: Vec<&str> = cronq.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["producer-a", "producer-b", "consumer"]);
        for service in cronq {
            let command = service
                .command
                .as_ref()
                .expect("every cronq service has a command");
            let argv = std::iter::once("cronq".to_owned()).chain(command.iter().cloned());
            if let Err(err) = Cli::try_parse_from(argv) {
                panic!(
                    "service {}: command {command:?} does not parse:\n{err}",
                    service.name
                );
            }
        }
        // The health check runs the binary too.
        let health = text
            .lines()
            .find_map(|l| {
                flow_list(l, "test:").filter(|t| t.get(1).is_some_and(|a| a.ends_with("/cronq")))
            })
            .expect("the cronq services have a health check that runs cronq");
        let argv = std::iter::once("cronq".to_owned()).chain(health[2..].iter().cloned());
        assert!(
            Cli::try_parse_from(argv).is_ok(),
            "health check {health:?} does not parse"
        );
    }

    #[test]
    fn the_compose_file_mounts_a_config_that_passes_check() {
        let text = compose();
        let mount = text
            .lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix("- ./")
                    .filter(|m| m.contains(":/etc/cronq/cronq.toml"))
            })
            .expect("the compose file mounts a config at /etc/cronq/cronq.toml");
        assert!(
            text.contains("CRONQ_CONFIG: /etc/cronq/cronq.toml"),
            "CRONQ_CONFIG points at the mount"
        );
        let local = mount.split(':').next().expect("a mount has a source");
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(local);
        if let Err(err) = cronq_shared::config::Config::load(&path) {
            panic!("the mounted config {local} does not pass check:\n{err}");
        }
    }
}
