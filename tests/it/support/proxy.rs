//! A loopback TCP proxy a test owns, to take a shared service away from one process only:
//! it forwards every connection to its target until [`Proxy::cut`], which drops every open
//! connection and closes each new one at once (the client reads EOF before any byte), or
//! [`Proxy::stall`], which keeps every connection open but passes no byte either way (a
//! service that hangs), or [`Proxy::hold_replies`], which passes the client's bytes to the
//! service but holds back the service's answers (a request that arrives, and whose answer
//! comes late), or [`Proxy::hold_requests`], which hands over the answers (those held back
//! too) but holds back what clients send; [`Proxy::restore`] drops the stalled connections,
//! hands over what was held back, and lets new connections through again. The service
//! itself never stops, so the other tests using it see nothing.
//! [`Proxy::upstream_ports`] names the proxy's own connections to the service, so a test
//! can close them at the service's end (`CLIENT KILL`, `rabbitmqctl close_connection`).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{amqp_url, redis_url};

/// Which shared service a proxy stands in front of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    Redis,
    Amqp,
}

impl Link {
    /// The variable that tells a `cronq` process where the service is.
    pub fn var(self) -> &'static str {
        match self {
            Self::Redis => "CRONQ_REDIS_URL",
            Self::Amqp => "CRONQ_AMQP_URL",
        }
    }

    /// The shared service's URL, and the `HOST:PORT` it names.
    fn service(self) -> (String, String) {
        let url = match self {
            Self::Redis => redis_url(),
            Self::Amqp => amqp_url(),
        };
        let (_, rest) = url.split_once("://").expect("a URL with a scheme");
        let authority = rest.split(['/', '?']).next().unwrap_or(rest);
        let host_port = authority.rsplit('@').next().unwrap_or(authority).to_owned();
        (url, host_port)
    }
}

/// What the proxy does with connections now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Forwards them.
    Open,
    /// Drops them.
    Cut,
    /// Holds them open, passing nothing.
    Stalled,
    /// Forwards the client's bytes, holds back the service's.
    RepliesHeld,
    /// Forwards the service's bytes, holds back the client's.
    RequestsHeld,
}

impl Mode {
    /// Whether a client's bytes pass now.
    fn passes_requests(self) -> bool {
        matches!(self, Self::Open | Self::RepliesHeld)
    }

    /// Whether the service's bytes pass now.
    fn passes_replies(self) -> bool {
        matches!(self, Self::Open | Self::RequestsHeld)
    }
}

/// A running proxy; dropping it ends it and every connection through it.
pub struct Proxy {
    /// `127.0.0.1:PORT`, where clients connect.
    pub addr: String,
    mode: Arc<watch::Sender<Mode>>,
    /// The local ports of the proxy's open connections to its target.
    upstream: Arc<Mutex<BTreeSet<u16>>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `target` (`HOST:PORT`).
    pub async fn start(target: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy port");
        let addr = listener.local_addr().expect("proxy address").to_string();
        let mode = Arc::new(watch::Sender::new(Mode::Open));
        let target = target.to_owned();
        let upstream = Arc::new(Mutex::new(BTreeSet::new()));
        let accept = tokio::spawn({
            let mode = mode.clone();
            let upstream = upstream.clone();
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
                        Mode::Open | Mode::RepliesHeld | Mode::RequestsHeld => {
                            tokio::spawn(forward(
                                client,
                                target.clone(),
                                mode.subscribe(),
                                upstream.clone(),
                            ));
                        }
                    }
                }
            }
        });
        Self {
            addr,
            mode,
            upstream,
            accept,
        }
    }

    /// A proxy in front of the shared service of `link`, and that service's URL through it.
    pub async fn before(link: Link) -> (Self, String) {
        let (url, target) = link.service();
        let proxy = Self::start(&target).await;
        let through = url.replacen(&target, &proxy.addr, 1);
        (proxy, through)
    }

    /// The local ports of the proxy's open connections to its target.
    pub fn upstream_ports(&self) -> Vec<u16> {
        self.upstream
            .lock()
            .expect("the proxy's port set")
            .iter()
            .copied()
            .collect()
    }

    /// Drops every open connection and refuses new ones until [`Proxy::restore`].
    pub fn cut(&self) {
        self.mode.send_replace(Mode::Cut);
    }

    /// Keeps every connection, open and new, but passes no byte until [`Proxy::restore`].
    pub fn stall(&self) {
        self.mode.send_replace(Mode::Stalled);
    }

    /// Passes what clients send to the service, but none of its answers until
    /// [`Proxy::restore`], which hands them over.
    pub fn hold_replies(&self) {
        self.mode.send_replace(Mode::RepliesHeld);
    }

    /// Hands over the answers held back and every answer after them, but passes none of
    /// what clients send until [`Proxy::restore`], which sends it on.
    pub fn hold_requests(&self) {
        self.mode.send_replace(Mode::RequestsHeld);
    }

    /// Drops the stalled connections, hands over what was held back, and lets new
    /// connections through again.
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
/// cuts or stalls; both sockets are dropped then, or held while it stalls. While the
/// proxy holds replies or requests, what that side sends waits (in the sockets' buffers).
async fn forward(
    client: TcpStream,
    target: String,
    mut mode: watch::Receiver<Mode>,
    ports: Arc<Mutex<BTreeSet<u16>>>,
) {
    let Ok(upstream) = TcpStream::connect(&target).await else {
        return;
    };
    let port = upstream.local_addr().map(|a| a.port()).ok();
    let set = |open: bool| {
        if let Some(port) = port {
            let mut ports = ports.lock().expect("the proxy's port set");
            if open {
                ports.insert(port);
            } else {
                ports.remove(&port);
            }
        }
    };
    set(true);
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut upstream_rx, mut upstream_tx) = upstream.into_split();
    let broken = |m: &Mode| matches!(m, Mode::Cut | Mode::Stalled);
    tokio::select! {
        () = pump(&mut client_rx, &mut upstream_tx, mode.clone(), Mode::passes_requests) => {
            set(false);
            return;
        }
        () = pump(&mut upstream_rx, &mut client_tx, mode.clone(), Mode::passes_replies) => {
            set(false);
            return;
        }
        _ = mode.wait_for(broken) => {}
    }
    set(false);
    hold((client_rx, client_tx, upstream_rx, upstream_tx), mode).await;
}

/// Copies `from` to `to` until either closes, each chunk waiting until the proxy's mode
/// `passes` it.
async fn pump(
    from: &mut OwnedReadHalf,
    to: &mut OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
    passes: fn(Mode) -> bool,
) {
    let mut buf = vec![0; 16 * 1024];
    loop {
        let Ok(n @ 1..) = from.read(&mut buf).await else {
            return;
        };
        // Cut or stalled meanwhile: the caller drops or holds the sockets.
        let _ = mode.wait_for(|m| passes(*m)).await;
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Keeps `sockets` open, reading nothing, while the proxy stalls.
async fn hold<S>(sockets: S, mut mode: watch::Receiver<Mode>) {
    let _ = mode.wait_for(|m| *m != Mode::Stalled).await;
    drop(sockets);
}
