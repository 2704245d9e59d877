//! SIGINT/SIGTERM cancel the root token; a second signal exits at once. SIGHUP is
//! forwarded to whoever reloads the config.

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Cancels `root` on the first SIGINT or SIGTERM; exits the process on the second.
///
/// This is the one detached task in cronq: it must outlive every component it stops.
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

/// A receiver that yields once per SIGHUP.
pub fn hangups() -> std::io::Result<mpsc::Receiver<()>> {
    let mut hup = signal(SignalKind::hangup())?;
    // Capacity 1: a reload request that is already pending covers any later ones.
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            let _ = tx.try_send(());
            if tx.is_closed() {
                break;
            }
        }
    });
    Ok(rx)
}
