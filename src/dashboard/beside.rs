//! The dashboard a process serves beside its own work (`cronq standalone
//! --dashboard-addr`): its access is read before anything connects, and it shows the
//! config file as the process loaded it last (each SIGHUP reload, [`follow`]).
//!
//! Invariant: a dashboard beside a process is the same dashboard as `cronq dashboard`'s,
//! on the same [`Source`]; if it fails, the process's work is stopped by its caller.

use std::net::SocketAddr;
use std::sync::Arc;

use cronq_backends::Deployment;
use cronq_shared::config::Config;
use cronq_shared::recorded::Load;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{Access, Source};
use crate::cli::DashboardToken;
use crate::settings::Target;

/// A dashboard asked for, its access read, nothing connected yet.
pub struct Beside {
    addr: SocketAddr,
    access: Access,
}

/// A dashboard ready to serve.
pub struct Shown {
    addr: SocketAddr,
    access: Access,
    source: Source,
    /// The process's loads of the config file, and where the dashboard reads them.
    loads: watch::Receiver<Option<Arc<Load>>>,
    file: watch::Sender<Arc<Config>>,
}

impl Beside {
    /// The dashboard at `addr`, if one is asked for, with its access read as `token` says.
    ///
    /// # Errors
    /// A usage error from [`Access::load`].
    pub fn load(addr: Option<SocketAddr>, token: &DashboardToken) -> anyhow::Result<Option<Self>> {
        let Some(addr) = addr else {
            return Ok(None);
        };
        Ok(Some(Self {
            addr,
            access: Access::load(
                token.tokens_file.as_deref(),
                token.dashboard_token_file.as_deref(),
            )?,
        }))
    }

    /// The dashboard showing the config file's config of each load `loads` sees (the
    /// process's start config, made by `start`, until there is one), on `deployment`, the
    /// ports of `target`.
    pub fn showing(
        self,
        mut loads: watch::Receiver<Option<Arc<Load>>>,
        start: impl FnOnce() -> Arc<Config>,
        deployment: Deployment,
        target: &Target,
    ) -> Shown {
        let first = loads
            .borrow_and_update()
            .as_ref()
            .map_or_else(start, |load| load.config.clone());
        let (file, config) = watch::channel(first);
        Shown {
            addr: self.addr,
            access: self.access,
            source: Source::of(config, deployment, target),
            loads,
            file,
        }
    }
}

impl Shown {
    /// Serves until `token` is cancelled (see [`super::serve`]).
    ///
    /// # Errors
    /// As [`super::serve`].
    pub async fn serve(
        self,
        metrics: PrometheusHandle,
        token: CancellationToken,
    ) -> anyhow::Result<()> {
        let following = follow(self.loads, self.file, token.child_token());
        let served = super::serve(self.addr, self.source, self.access, metrics, token);
        super::serve_following(served, following).await
    }
}

/// Serves `dashboard`, if there is one, until `token` is cancelled.
///
/// # Errors
/// As [`super::serve`].
pub async fn serve(
    dashboard: Option<Shown>,
    metrics: PrometheusHandle,
    token: CancellationToken,
) -> anyhow::Result<()> {
    match dashboard {
        Some(shown) => shown.serve(metrics, token).await,
        None => Ok(()),
    }
}

/// Sends the config file's config of each load `loads` sees next (the process's reloads)
/// into `file`, until `token` is cancelled or the loads end.
async fn follow(
    mut loads: watch::Receiver<Option<Arc<Load>>>,
    file: watch::Sender<Arc<Config>>,
    token: CancellationToken,
) {
    loop {
        tokio::select! {
            () = token.cancelled() => return,
            changed = loads.changed() => if changed.is_err() { return },
        }
        if let Some(load) = loads.borrow_and_update().clone() {
            file.send_replace(load.config.clone());
        }
    }
}
