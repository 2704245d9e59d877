//! SIGINT/SIGTERM cancel the root token; a second signal exits at once. SIGHUP is
//! forwarded to whoever reloads the config.
//!
//! Invariant: this is the one place a command installs its signal handlers; a
//! long-running command ([`install`]) stops its SIGHUP forwarder ([`Forwarder::stop`])
//! once its work has returned.

use anyhow::Context as _;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Cancels `root` on the first SIGINT or SIGTERM; exits the process on the second.
///
/// This is the one detached task in cronq, on purpose: it must outlive every component it
/// stops, down to the last step of a drain, to turn a second signal into an immediate exit;
/// no owner lives that long but the process itself.
pub fn cancel_on_signal(root: CancellationToken) -> std::io::Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        tracing::info!("shutting down: signal received, send it again to exit at once");
        root.cancel();
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        tracing::warn!("second signal: exiting at once");
        std::process::exit(130);
    });
    Ok(())
}

/// A receiver that yields once per SIGHUP. The forwarding task is spawned into `tasks`
/// (its owner's) and ends when `token` is cancelled or the receiver is dropped.
pub fn hangups(
    tasks: &mut JoinSet<()>,
    token: CancellationToken,
) -> std::io::Result<mpsc::Receiver<()>> {
    let mut hup = signal(SignalKind::hangup())?;
    // Capacity 1: a reload request that is already pending covers any later ones.
    let (tx, rx) = mpsc::channel(1);
    tasks.spawn(async move {
        loop {
            tokio::select! {
                biased;
                () = token.cancelled() => break,
                () = tx.closed() => break,
                hup = hup.recv() => match hup {
                    Some(()) => {
                        let _ = tx.try_send(());
                    }
                    None => break,
                },
            }
        }
    });
    Ok(rx)
}

/// Owns the SIGHUP forwarder; dropping it (on any return) aborts it.
pub struct Forwarder(JoinSet<()>);

impl Forwarder {
    /// Stops the forwarder and waits for it.
    pub async fn stop(mut self) {
        self.0.shutdown().await;
    }
}

/// What a long-running command installs: SIGINT/SIGTERM cancel `root`
/// ([`cancel_on_signal`]), and each SIGHUP comes out of the receiver ([`hangups`]).
///
/// # Errors
/// A handler that cannot be installed.
pub fn install(root: &CancellationToken) -> anyhow::Result<(Forwarder, mpsc::Receiver<()>)> {
    cancel_on_signal(root.clone()).context("while installing signal handlers")?;
    let mut tasks = JoinSet::new();
    let hangups =
        hangups(&mut tasks, root.child_token()).context("while installing the SIGHUP handler")?;
    Ok((Forwarder(tasks), hangups))
}
