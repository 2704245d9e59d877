//! The producer as one long-running part: an elector, a scheduler and (optionally) a
//! config reloader, owned in one `JoinSet`, stopped by one token.

use std::sync::Arc;

use cronq_shared::broker::Broker;
use cronq_shared::config::Config;
use cronq_shared::control::Control;
use cronq_shared::jobs::JobStore;
use cronq_shared::lease::Lease;
use std::future::Future;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::config_record::ConfigRecorder;
use crate::error::Error;
use crate::leader::{Elector, Leadership};
use crate::scheduler::Scheduler;
use cronq_shared::reload::Reloader;

/// A producer: joins leader election; while leading, publishes occurrences.
pub struct Producer {
    broker: Arc<dyn Broker>,
    elector: Elector,
    /// Where the scheduler records each term it takes over (`Lease::begin`).
    lease: Arc<dyn Lease>,
    leadership: watch::Receiver<Option<Leadership>>,
    control: Control,
    config: watch::Receiver<Arc<Config>>,
    reloader: Option<Reloader>,
    /// Where the leader records the config file it loaded (`crate::config_record`).
    record_in: Option<Arc<dyn JobStore>>,
    instance: String,
}

impl Producer {
    /// A producer with id `instance` (see [`instance_id`]) reading its config from `config`.
    pub fn new(
        broker: Arc<dyn Broker>,
        lease: Arc<dyn Lease>,
        control: Control,
        config: watch::Receiver<Arc<Config>>,
        instance: impl Into<String>,
    ) -> Self {
        let instance = instance.into();
        let (elector, leadership) =
            Elector::new(Arc::clone(&lease), instance.clone(), config.clone());
        Self {
            broker,
            elector,
            lease,
            leadership,
            control,
            config,
            reloader: None,
            record_in: None,
            instance,
        }
    }

    /// Resolves once this producer leads for the first time, or once it has stopped
    /// without having led (`cronq standalone` starts its consumer half on this).
    pub fn first_term(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut leadership = self.leadership.clone();
        async move {
            // An error means the producer is gone: nothing more to wait for.
            let _ = leadership.wait_for(Option::is_some).await;
        }
    }

    /// This producer's leadership, as the scheduler sees it (`None` while a standby).
    pub fn leadership(&self) -> watch::Receiver<Option<Leadership>> {
        self.leadership.clone()
    }

    /// Also runs `reloader` (SIGHUP handling) for the producer's lifetime.
    pub fn with_reloader(mut self, reloader: Reloader) -> Self {
        self.reloader = Some(reloader);
        self
    }

    /// Also records, while leading, each load of the config file the reloader reports
    /// (`Reloader::with_text`) in `jobs` (see [`crate::config_record`]).
    pub fn with_recorder(mut self, jobs: Arc<dyn JobStore>) -> Self {
        self.record_in = Some(jobs);
        self
    }

    /// Runs until `shutdown` is cancelled; then stops publishing and releases the lease at
    /// once (a standby takes over within one `retry`).
    ///
    /// # Errors
    /// [`Error::Task`] when a task panicked.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), Error> {
        let (elector, leadership) = (self.elector, self.leadership);
        let scheduler = Scheduler::new(
            self.broker,
            self.lease,
            self.control,
            self.config,
            leadership.clone(),
        );
        info!(instance_id = %self.instance, "producer started: joining leader election");
        let mut tasks = JoinSet::new();
        // Each task's name by its id, so a failure names the task that failed.
        let mut names = Vec::with_capacity(3);
        // If the elector or the scheduler ends (or panics) the others stop too.
        let token = shutdown.child_token();
        {
            let (t, stop_others) = (token.clone(), token.clone().drop_guard());
            let task = tasks.spawn(async move {
                let _stop_others = stop_others; // cancels siblings even on panic
                elector.run(t).await;
            });
            names.push((task.id(), "elector"));
        }
        {
            let (t, stop_others) = (token.clone(), token.clone().drop_guard());
            let task = tasks.spawn(async move {
                let _stop_others = stop_others;
                scheduler.run(t).await;
            });
            names.push((task.id(), "scheduler"));
        }
        if let (Some(jobs), Some(reloader)) = (self.record_in, &self.reloader) {
            let recorder = ConfigRecorder::new(
                jobs,
                reloader.loads(),
                leadership.clone(),
                self.instance.clone(),
            );
            let t = token.clone();
            let task = tasks.spawn(async move { recorder.run(t).await });
            names.push((task.id(), "config recorder"));
        }
        if let Some(reloader) = self.reloader {
            let t = token.clone();
            let task = tasks.spawn(async move { reloader.run(t).await });
            names.push((task.id(), "reloader"));
        }
        let mut failure = None;
        while let Some(joined) = tasks.join_next().await {
            if let Err(source) = joined {
                token.cancel();
                let task = names
                    .iter()
                    .find(|(id, _)| *id == source.id())
                    .map_or("unknown", |(_, name)| name);
                failure.get_or_insert(Error::Task { task, source });
            }
        }
        drop(leadership);
        info!(instance_id = %self.instance, "producer stopped");
        failure.map_or(Ok(()), Err)
    }
}

/// A fresh instance id: host name, process id and a random suffix (no spaces).
pub fn instance_id() -> String {
    format!(
        "{}-{}-{:04x}",
        cronq_shared::host::name(),
        std::process::id(),
        rand::random::<u16>()
    )
}
