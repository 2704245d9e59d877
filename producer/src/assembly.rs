//! The leader's side, assembled once for every process that runs a producer (`cronq
//! producer`, `cronq standalone`): the config reloader, the [`Producer`] with its config
//! recorder, and the checks that work while it leads ([`Chains`], [`AccountingCheck`],
//! [`Alerts`] with its gaps, [`PoolCheck`]).
//!
//! Invariant: a process that runs a producer runs all of these, on the ports it is given,
//! and counts what its leader publishes; what differs between processes (how it reports
//! itself in the fleet registry, a consumer half) is its caller's.

use std::sync::Arc;

use cronq_fleet::tally::{CountingBroker, Tally};
use cronq_shared::audit::AuditLog;
use cronq_shared::broker::Broker;
use cronq_shared::config::Config;
use cronq_shared::control::Control;
use cronq_shared::jobs::JobStore;
use cronq_shared::lease::Lease;
use cronq_shared::ledger::Ledger;
use cronq_shared::recorded::Load;
use cronq_shared::registry::Registry;
use cronq_shared::reload::Reloader;
use cronq_shared::runlog::RunLog;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::accounting_check::{self, AccountingCheck, Trailing};
use crate::alerts::{self, Alerts};
use crate::chains::{self, Chains};
use crate::pool_check::PoolCheck;
use crate::service::Producer;

/// The ports the leader's side works on.
pub struct Ports {
    /// The queue the leader publishes to (what it publishes is counted).
    pub broker: Arc<dyn Broker>,
    /// The ledger the chains read their parents' ends from.
    pub ledger: Arc<dyn Ledger>,
    /// The ledger whose pools' use `/metrics` shows.
    pub pool_ledger: Arc<dyn Ledger>,
    /// The run history.
    pub runlog: Arc<dyn RunLog>,
    /// The leader lease.
    pub lease: Arc<dyn Lease>,
    /// Cursors, pauses, requests.
    pub control: Control,
    /// The instances alive.
    pub registry: Arc<dyn Registry>,
    /// Runtime jobs and the recorded config.
    pub jobs: Arc<dyn JobStore>,
    /// The operators' actions.
    pub audit: Arc<dyn AuditLog>,
}

/// The leader's side, ready to run.
pub struct Assembly {
    /// The producer; its leadership drives the checks.
    pub producer: Producer,
    /// The config in force (the file, reloaded on SIGHUP, with the runtime jobs).
    pub config: watch::Receiver<Arc<Config>>,
    /// Each load of the config file alone (without the runtime jobs), the first given.
    pub loads: watch::Receiver<Option<Arc<Load>>>,
    /// The checks that work while the producer leads.
    pub checks: Checks,
}

/// The checks that work while the producer leads.
pub struct Checks {
    chains: Chains,
    accounting: AccountingCheck,
    alerts: Alerts,
    pools: PoolCheck,
}

impl Checks {
    /// Runs every check until `token` is cancelled.
    pub async fn run(self, token: CancellationToken) {
        tokio::join!(
            self.accounting.run(token.clone()),
            self.alerts.run(token.clone()),
            self.pools.run(token.clone()),
            self.chains.run(token),
        );
    }
}

/// Assembles the leader's side of the producer `instance`: `config` (loaded from `text`)
/// reloaded on each of `hangups` and as the runtime jobs change (their first poll done
/// before it returns, so a first term takes them over with their cursors); what the leader
/// publishes counted into `tally`; the trailing window checked by `trailing`.
pub async fn assemble(
    config: Config,
    text: Arc<str>,
    hangups: mpsc::Receiver<()>,
    ports: Ports,
    instance: &str,
    tally: &Tally,
    trailing: Trailing,
) -> Assembly {
    let (reloader, config_rx) = Reloader::new(config, hangups);
    let mut reloader = reloader.with_text(text).with_store(ports.jobs.clone());
    reloader.poll().await;
    let loads = reloader.loads();
    let counted: Arc<dyn Broker> = Arc::new(CountingBroker::new(ports.broker, tally.clone()));
    let producer = Producer::new(
        counted.clone(),
        ports.lease.clone(),
        ports.control.clone(),
        config_rx.clone(),
        instance,
    )
    .with_reloader(reloader)
    .with_recorder(ports.jobs.clone());
    let leadership = producer.leadership();
    let chains = Chains::new(
        chains::Sources {
            runlog: ports.runlog.clone(),
            ledger: ports.ledger,
            broker: counted,
            control: ports.control.clone(),
        },
        config_rx.clone(),
        leadership.clone(),
        instance.to_owned(),
    );
    let accounting = AccountingCheck::new(
        accounting_check::Stores {
            runlog: ports.runlog.clone(),
            audit: ports.audit.clone(),
            jobs: ports.jobs,
            control: ports.control.clone(),
            lease: ports.lease.clone(),
        },
        config_rx.clone(),
        leadership.clone(),
        trailing,
    );
    let alerts = Alerts::new(
        alerts::Sources {
            runlog: ports.runlog,
            registry: ports.registry,
            lease: ports.lease,
            control: ports.control,
            audit: ports.audit,
        },
        config_rx.clone(),
        leadership.clone(),
        instance,
    )
    .with_gaps(accounting.gaps());
    let pools = PoolCheck::new(ports.pool_ledger, config_rx.clone(), leadership);
    Assembly {
        producer,
        config: config_rx,
        loads,
        checks: Checks {
            chains,
            accounting,
            alerts,
            pools,
        },
    }
}
