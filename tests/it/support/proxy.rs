//! A loopback TCP proxy a test owns, to take a shared service away from one process only:
//! it forwards every connection to its target until [`Proxy::cut`], which drops every open
//! connection and closes each new one at once (the client reads EOF before any byte), and
//! [`Proxy::restore`] lets connections through again. The service itself never stops, so
//! the other tests using it see nothing.

use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A running proxy; dropping it ends it and every connection through it.
pub struct Proxy {
    /// `127.0.0.1:PORT`, where clients connect.
    pub addr: String,
    /// `true` while connections go through.
    open: Arc<watch::Sender<bool>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `target` (`HOST:PORT`).
    pub async fn start(target: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy port");
        let addr = listener.local_addr().expect("proxy address").to_string();
        let open = Arc::new(watch::Sender::new(true));
        let target = target.to_owned();
        let accept = tokio::spawn({
            let open = open.clone();
            async move {
                loop {
                    let Ok((client, _)) = listener.accept().await else {
                        continue;
                    };
                    if !*open.borrow() {
                        // Cut: the client's connection ends before a byte is exchanged.
                        drop(client);
                        continue;
                    }
                    tokio::spawn(forward(client, target.clone(), open.subscribe()));
                }
            }
        });
        Self { addr, open, accept }
    }

    /// Drops every open connection and refuses new ones until [`Proxy::restore`].
    pub fn cut(&self) {
        self.open.send_replace(false);
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.open.send_replace(true);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.open.send_replace(false);
        self.accept.abort();
    }
}

/// Copies both ways between `client` and `target` until either side closes or the proxy is
/// cut; both sockets are dropped then.
async fn forward(mut client: TcpStream, target: String, mut open: watch::Receiver<bool>) {
    let Ok(mut upstream) = TcpStream::connect(&target).await else {
        return;
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
        _ = open.wait_for(|open| !*open) => {}
    }
}
