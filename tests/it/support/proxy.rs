//! A loopback TCP proxy a test owns, to take a shared service away from one process only:
//! it forwards every connection to its target until [`Proxy::cut`], which drops every open
//! connection and closes each new one at once (the client reads EOF before any byte), or
//! [`Proxy::stall`], which keeps every connection open but passes no byte either way (a
//! service that hangs); [`Proxy::restore`] drops the stalled connections and lets new ones
//! through again. The service itself never stops, so the other tests using it see nothing.

use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy does with connections now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Forwards them.
    Open,
    /// Drops them.
    Cut,
    /// Holds them open, passing nothing.
    Stalled,
}

/// A running proxy; dropping it ends it and every connection through it.
pub struct Proxy {
    /// `127.0.0.1:PORT`, where clients connect.
    pub addr: String,
    mode: Arc<watch::Sender<Mode>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `target` (`HOST:PORT`).
    pub async fn start(target: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy port");
        let addr = listener.local_addr().expect("proxy address").to_string();
        let mode = Arc::new(watch::Sender::new(Mode::Open));
        let target = target.to_owned();
        let accept = tokio::spawn({
            let mode = mode.clone();
            async move {
                loop {
                    let Ok((client, _)) = listener.accept().await else {
                        continue;
                    };
                    let now = *mode.borrow();
                    match now {
                        // The client's connection ends before a byte is exchanged.
                        Mode::Cut => drop(client),
                        Mode::Stalled => {
                            tokio::spawn(hold(vec![client], mode.subscribe()));
                        }
                        Mode::Open => {
                            tokio::spawn(forward(client, target.clone(), mode.subscribe()));
                        }
                    }
                }
            }
        });
        Self { addr, mode, accept }
    }

    /// Drops every open connection and refuses new ones until [`Proxy::restore`].
    pub fn cut(&self) {
        self.mode.send_replace(Mode::Cut);
    }

    /// Keeps every connection, open and new, but passes no byte until [`Proxy::restore`].
    pub fn stall(&self) {
        self.mode.send_replace(Mode::Stalled);
    }

    /// Drops the stalled connections and lets new ones through again.
    pub fn restore(&self) {
        self.mode.send_replace(Mode::Open);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.mode.send_replace(Mode::Cut);
        self.accept.abort();
    }
}

/// Copies both ways between `client` and `target` until either side closes or the proxy
/// leaves [`Mode::Open`]; both sockets are dropped then, or held while it stalls.
async fn forward(mut client: TcpStream, target: String, mut mode: watch::Receiver<Mode>) {
    let Ok(mut upstream) = TcpStream::connect(&target).await else {
        return;
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => return,
        _ = mode.wait_for(|m| *m != Mode::Open) => {}
    }
    hold(vec![client, upstream], mode).await;
}

/// Keeps `sockets` open, reading nothing, while the proxy stalls.
async fn hold(sockets: Vec<TcpStream>, mut mode: watch::Receiver<Mode>) {
    let _ = mode.wait_for(|m| *m != Mode::Stalled).await;
    drop(sockets);
}
