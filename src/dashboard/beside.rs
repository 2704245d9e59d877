//! The dashboard a process serves beside its own work (`cronq standalone
//! --dashboard-addr`): its access is read before anything connects, and it shows the
//! config of the start (a SIGHUP reload does not change it).
//!
//! Invariant: a dashboard beside a process is the same dashboard as `cronq dashboard`'s,
//! on the same [`Source`]; if it fails, the process's work is stopped by its caller.

use std::net::SocketAddr;
use std::sync::Arc;

use cronq_backends::Deployment;
use cronq_shared::config::Config;
use metrics_exporter_prometheus::PrometheusHandle;
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

    /// The dashboard showing `config` on `deployment`, the ports of `target`.
    pub fn showing(self, config: &Config, deployment: Deployment, target: &Target) -> Shown {
        let source = Source::of(Arc::new(config.clone()), deployment, target);
        Shown {
            addr: self.addr,
            access: self.access,
            source,
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
        super::serve(self.addr, self.source, self.access, metrics, token).await
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
