//! `cronq standalone`: producer and consumer in one process, on one SQLite data file
//! (`--data`, default `cronq.db`): no RabbitMQ, no Redis, and everything (queue, cursors,
//! pauses, records, history, dead letters) survives a restart; or in memory with
//! `--data :memory:`, where nothing does.
//!
//! Two standalones on one file: the one holding the leader lease in the file runs the jobs;
//! the other waits as a standby (its consumer half starts only once it leads) and takes over
//! within the lease when the first stops.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use cronq_backends::{Connect, Deployment};
use cronq_consumer::{Consumer, Options};
use cronq_fleet::digester::Digester;
use cronq_fleet::reporter::Reporter;
use cronq_fleet::tally::{CountingLedger, Tally};
use cronq_producer::assembly::{self, Assembly};
use cronq_producer::{ConfigCheck, ServingCheck, instance_id, leader};
use cronq_shared::lease::Lease;
use cronq_shared::registry::Role;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::admin::{self, ReadyProbe};
use crate::cli::{Cli, StandaloneArgs};
use crate::settings::Target;

/// How long a standalone waits to lead before it looks whether another one holds the file.
const STANDBY_NOTE_AFTER: Duration = Duration::from_secs(1);

/// Runs until the root token is cancelled, then stops publishing and drains within
/// `--grace`.
pub async fn run(cli: &Cli, args: &StandaloneArgs, root: CancellationToken) -> anyhow::Result<()> {
    let data = crate::settings::standalone_data(cli)?;
    match &data {
        Some(path) => tracing::info!(
            data = %path.display(),
            "standalone: data file {}",
            path.display()
        ),
        None => tracing::info!(
            data = crate::settings::IN_MEMORY,
            "standalone: in memory (--data :memory:): nothing survives this process"
        ),
    }
    let (config, text) = crate::settings::load_config_and_text(cli)?;
    crate::settings::check_commands(cli, &config)?;
    for warning in &config.warnings {
        tracing::warn!(warning = %warning, "config");
    }
    let keyring = crate::settings::keyring(cli)?;
    let admin = match args.dashboard_addr {
        Some(_) => Some(crate::dashboard::Access::load(
            args.token.tokens_file.as_deref(),
            args.token.dashboard_token_file.as_deref(),
        )?),
        None => None,
    };
    let target = match data {
        Some(path) => Target::Data {
            path,
            sync: cli.data_sync.into(),
            keyring: keyring.clone(),
        },
        None => Target::Memory {
            keyring: keyring.clone(),
        },
    };
    let Deployment { broker, stores } =
        cronq_backends::open(&target, config.longest_retention(), Connect::Patient).await?;
    super::signals::cancel_on_signal(root.clone()).context("while installing signal handlers")?;
    // Owns the SIGHUP forwarder; dropping it (on any return) aborts it.
    let mut signal_tasks = JoinSet::new();
    let hangups = super::signals::hangups(&mut signal_tasks, root.child_token())
        .context("while installing the SIGHUP handler")?;
    let metrics = admin::install_metrics(&config.metrics)?;
    let shown_metrics = metrics.clone();

    // The dashboard shows the config of the start (a SIGHUP reload does not change it).
    let dashboard = match (args.dashboard_addr, admin) {
        (Some(addr), Some(admin)) => {
            let config = Arc::new(config.clone());
            let deployment = Deployment {
                broker: broker.clone(),
                stores: stores.clone(),
            };
            let source = super::dashboard::source(config, deployment, &target);
            Some((addr, source, admin))
        }
        _ => None,
    };

    let instance = instance_id();
    let options = Options {
        queues: Vec::new(),
        concurrency: args.concurrency.max(1),
        grace: args.grace,
        lease: args.lease,
        consumer_id: format!("standalone-{instance}"),
        keyring,
    };
    // One instance on the Fleet page, counting what both halves do (docs/dashboard.md).
    let tally = Tally::default();
    let ledger = Arc::new(CountingLedger::new(stores.ledger.clone(), tally.clone()));
    // The pools' use on /metrics reads the same ledger (reads are not counted). Both
    // halves follow one config: a SIGHUP reload reaches the consumer half too, so a job
    // added to the file runs instead of being dead-lettered as unknown.
    let ports = super::producer::leader_ports(&stores, broker.clone(), ledger.clone());
    let trailing = args.reconcile.trailing();
    let Assembly {
        producer,
        config: config_rx,
        checks,
    } = assembly::assemble(
        config.clone(),
        text,
        hangups,
        ports,
        &instance,
        &tally,
        trailing,
    )
    .await;
    let consumer = Consumer::new(config, broker, ledger, options)
        .following(config_rx.clone())
        .keep_outputs(Arc::clone(&stores.runlog), args.output.output_limit)
        .with_job_store(stores.jobs.clone());
    // One digest per config, for the reporter and the config check alike.
    let (digester, digest_rx) = Digester::new(config_rx.clone()).await;
    let lease = stores.lease.clone();
    // It serves what its consumer half serves, in the same process.
    let reporter = Reporter::new(
        stores.registry.clone(),
        &instance,
        Role::Standalone,
        digest_rx.clone(),
        tally,
    )
    .with_leading(leader::leading_since(producer.leadership()))
    .with_serves(consumer.serves())
    .with_running(consumer.running());
    let check = ConfigCheck::new(stores.registry.clone(), digest_rx, producer.leadership());
    let serving = ServingCheck::new(stores.registry, config_rx, producer.leadership());
    let first_term = producer.first_term();

    let ready: ReadyProbe = Arc::new(|| Box::pin(async { Ok("standalone".to_owned()) }));
    // The producer stops at once on shutdown; the consumer drains within --grace. If one
    // half fails, the other is stopped too: half a standalone is no use.
    let token = root.child_token();
    let stop_all = |failed: bool| {
        if failed {
            token.cancel();
        }
    };
    let (served, shown, produced, consumed, (), (), (), (), ()) = tokio::join!(
        admin::serve(args.serve.admin_addr, metrics, ready, token.clone()),
        async {
            let Some((addr, source, admin)) = dashboard else {
                return Ok(());
            };
            let r =
                crate::dashboard::serve(addr, source, admin, shown_metrics, token.child_token())
                    .await;
            stop_all(r.is_err());
            r
        },
        async {
            let r = producer.run(token.child_token()).await;
            stop_all(r.is_err());
            r
        },
        async {
            let t = token.child_token();
            if !until_leading(first_term, &*lease, &instance, &t).await {
                return Ok(());
            }
            let r = consumer.run(t).await;
            stop_all(r.is_err());
            r
        },
        digester.run(token.child_token()),
        reporter.run(token.child_token()),
        check.run(token.child_token()),
        serving.run(token.child_token()),
        checks.run(token.child_token()),
    );
    signal_tasks.shutdown().await;
    produced.context("while running the producer")?;
    consumed.context("while running the consumer")?;
    shown.context("while serving the dashboard")?;
    served
}

/// Waits until this standalone's producer leads (`true`), or `token` is cancelled; says
/// once that it is a standby when another standalone leads the file meanwhile.
async fn until_leading(
    first_term: impl Future<Output = ()>,
    lease: &dyn Lease,
    instance: &str,
    token: &CancellationToken,
) -> bool {
    tokio::pin!(first_term);
    // Long enough for an uncontested start to win the lease, so only a real standby says so.
    if let Ok(()) = tokio::time::timeout(STANDBY_NOTE_AFTER, &mut first_term).await {
        // It also resolves when the producer stopped without leading (shutdown).
        if token.is_cancelled() {
            return false;
        }
        tracing::info!(instance_id = %instance, "standalone: leading: running the jobs");
        return true;
    }
    if let Ok(Some(holder)) = lease.holder().await
        && holder.instance != instance
    {
        tracing::info!(
            instance_id = %instance,
            leader = %holder.instance,
            "standalone: another standalone runs on this data file: waiting as standby; it takes over within the leader lease when that one stops"
        );
    }
    tokio::select! {
        () = &mut first_term => {
            if token.is_cancelled() {
                return false;
            }
            tracing::info!(instance_id = %instance, "standalone: the standby took over: now running the jobs");
            true
        }
        () = token.cancelled() => false,
    }
}
