//! Embedding the cronq consumer in your own program, with a job handler written in Rust.
//!
//! The config names a job without `command` or `http`; this program registers its handler
//! by job name and runs the consumer until Ctrl-C (SIGINT).
//!
//! ```sh
//! cargo run --example embedded -- path/to/cronq.toml        # default: a built-in demo config
//! ```
//!
//! Handlers may run more than once for one occurrence (a consumer that dies mid-run is
//! replaced after its lease, see the README's guarantees): keep them idempotent, e.g. keyed by `occ.key`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use cronq_consumer::{Consumer, HandlerError, Options};
use cronq_shared::config::Config;
use cronq_shared::endpoints::{
    DEFAULT_AMQP_URL, DEFAULT_QUORUM_SIZE, DEFAULT_REDIS_URL, Endpoints, Tls,
};
use cronq_shared::message::Occurrence;
use cronq_shared::names::{JobName, Namespace};
use cronq_shared::signing::Keyring;
use tokio_util::sync::CancellationToken;

const DEMO_CONFIG: &str = r#"
[[job]]
name = "greet"
schedule = "@every 5s"
payload = { who = "world" }
# no command or http: this program registers the handler
"#;

/// The Rust handler: stops early when the attempt is cancelled (timeout, replaced,
/// shutdown); an `Err` is a failed attempt, retried per the job's backoff.
async fn greet(occ: Occurrence, token: CancellationToken) -> Result<(), HandlerError> {
    let who = occ.payload["who"].as_str().unwrap_or("nobody").to_owned();
    tokio::select! {
        () = tokio::time::sleep(Duration::from_millis(100)) => {}
        () = token.cancelled() => return Err("cancelled".into()),
    }
    println!("hello, {who}! ({} attempt {})", occ.key, occ.attempt);
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .init();
    let config = match std::env::args_os().nth(1) {
        Some(path) => Config::load(&PathBuf::from(path))?,
        None => Config::from_toml(DEMO_CONFIG, std::path::Path::new("demo.toml"))?,
    };
    let env = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.into());
    let endpoints = Endpoints {
        amqp_url: env("CRONQ_AMQP_URL", DEFAULT_AMQP_URL),
        amqp_quorum_size: DEFAULT_QUORUM_SIZE,
        redis_url: env("CRONQ_REDIS_URL", DEFAULT_REDIS_URL),
        redis_min_replicas: env("CRONQ_REDIS_MIN_REPLICAS", "0")
            .parse()
            .context("CRONQ_REDIS_MIN_REPLICAS")?,
        namespace: Namespace::new(env("CRONQ_NAMESPACE", "cronq")).context("CRONQ_NAMESPACE")?,
        // With CRONQ_SIGNING_KEY set, what it publishes is signed and what it consumes must be.
        keyring: Keyring::from_variable()?.map(Arc::new),
        tls: Tls::default(),
    };
    // The fleet's backends: RabbitMQ for the queue, Redis for the idempotency records.
    let stores = cronq_backends::stores(&endpoints, config.longest_retention(), None).await?;
    let broker = cronq_backends::broker(&endpoints).await?;
    let options = Options {
        keyring: endpoints.keyring.clone(),
        ..Options::default()
    };
    let mut consumer = Consumer::new(config, Arc::new(broker), stores.ledger, options);
    consumer.register(JobName::new("greet")?, greet);

    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    // The signal task is the one task left detached: it must outlive everything it stops.
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        stop.cancel();
    });
    consumer.run(shutdown).await?;
    Ok(())
}
