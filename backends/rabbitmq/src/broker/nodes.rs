//! The RabbitMQ nodes a broker may connect to: one URL, or a cluster's node URLs separated
//! by commas (`CRONQ_AMQP_URL`), and how a link is opened on the first live one.
//!
//! Each process takes the list in its own random order, so a fleet spreads its
//! connections over the cluster; when a link is lost, the next connection tries the node
//! after the lost one first, then each other node once.
//!
//! Invariant: a URL's credentials are only ever given to lapin; every log line and error
//! shows [`Node::redacted`]. Every node of an `amqps://` URL is reached with the same TLS
//! files (`CRONQ_TLS_*`, [`tls_config`]).

use std::time::Duration;

use lapin::tcp::{OwnedIdentity, OwnedTLSConfig};
use lapin::uri::AMQPUri;

use super::link::Link;
use cronq_shared::broker::BrokerError;
use cronq_shared::endpoints::{CONNECT_TIMEOUT, Tls};
use cronq_shared::redacted::Redacted;

/// Heartbeat asked for when the URL sets none: a silently dead TCP connection is noticed
/// within about twice this, instead of the server's default 60 s.
const HEARTBEAT_SECS: u16 = 10;

/// The largest frame a process that only publishes asks for when the URL sets none
/// ([`super::AmqpBroker::connect_publisher`]; the broker's own default is 128 KiB). lapin
/// keeps two buffers of 32 frames for each connection, zero-filled when it opens: 8 MiB a
/// connection at 128 KiB, 2 MiB at this. A body larger than a frame travels as several
/// frames; a process that receives messages keeps the broker's size, since a message's
/// headers must fit in one frame.
pub(super) const PUBLISHER_FRAME_MAX: u32 = 32 * 1024;

/// How long one node of a list may take to accept a connection before the next one is
/// tried: a node cut off by a partition does not answer at all, and the others must not
/// wait the whole [`CONNECT_TIMEOUT`] behind it.
const NODE_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// One node's URL.
pub(super) struct Node {
    /// With credentials: only ever given to lapin, never logged.
    uri: AMQPUri,
    /// As logs and errors show it.
    pub(super) redacted: String,
    /// The CAs trusted and the client certificate, for `amqps://`.
    tls: OwnedTLSConfig,
}

/// lapin's TLS settings from the TLS files: the CAs of `CRONQ_TLS_CA_FILE` are trusted
/// besides the system's roots (lapin adds them to its platform verifier), and the client
/// certificate is given to a server that asks for one.
fn tls_config(tls: &Tls) -> OwnedTLSConfig {
    OwnedTLSConfig {
        // Checked as PEM when read: valid UTF-8.
        cert_chain: tls
            .ca_pem()
            .map(|pem| String::from_utf8_lossy(pem).into_owned()),
        identity: tls.client_pem().map(|(cert, key)| OwnedIdentity::PKCS8 {
            pem: cert.to_vec(),
            key: key.to_vec(),
        }),
    }
}

/// An element of the list is not an AMQP URL (its text is not repeated: it may hold
/// credentials).
#[derive(Debug, thiserror::Error)]
#[error(
    "not a valid AMQP URL{position}: expected amqp://USER:PASSWORD@HOST:PORT/VHOST or \
     amqps://…, several separated by commas for the nodes of a cluster"
)]
struct BadUrl {
    /// Empty for a single URL, else which one of the list.
    position: String,
}

/// The error of a connection attempt that got no answer within `within`.
pub(super) fn no_answer(redacted: &str, within: Duration) -> BrokerError {
    super::unreachable(
        redacted.to_owned(),
        format!("no answer within {}s", within.as_secs()).into(),
    )
}

/// The nodes of `urls` (one URL, or several separated by commas), in a random order, each
/// reached with `tls` when its URL is `amqps://`.
///
/// # Errors
/// [`BrokerError::Connect`] naming the whole list, redacted, when an element is empty or
/// not an AMQP URL.
pub(super) fn parse(
    urls: &str,
    tls: &Tls,
    frame_max: Option<u32>,
) -> Result<Vec<Node>, BrokerError> {
    let config = tls_config(tls);
    let parts: Vec<&str> = urls.split(',').map(str::trim).collect();
    let bad = |i: usize| {
        super::unreachable(
            Redacted(urls).to_string(),
            Box::new(BadUrl {
                position: if parts.len() == 1 {
                    String::new()
                } else {
                    format!(" (URL {} of the {} in the list)", i + 1, parts.len())
                },
            }),
        )
    };
    let mut nodes = Vec::with_capacity(parts.len());
    for (i, part) in parts.iter().enumerate() {
        if part.is_empty() {
            return Err(bad(i));
        }
        let mut uri: AMQPUri = part.parse().map_err(|_| bad(i))?;
        if uri.query.heartbeat.is_none() {
            uri.query.heartbeat = Some(HEARTBEAT_SECS);
        }
        if uri.query.frame_max.is_none() {
            uri.query.frame_max = frame_max;
        }
        nodes.push(Node {
            uri,
            redacted: Redacted(part).to_string(),
            tls: config.clone(),
        });
    }
    fastrand::shuffle(&mut nodes);
    Ok(nodes)
}

/// Opens a link on the first node of `nodes` that accepts one, trying each once, from
/// index `start` on. Returns its node's index and the link.
///
/// # Errors
/// The last node's error when none accepted (each within its connect timeout).
pub(super) async fn open_first(nodes: &[Node], start: usize) -> Result<(usize, Link), BrokerError> {
    // One node: nowhere else to go, so it has the whole connect timeout.
    let within = if nodes.len() == 1 {
        CONNECT_TIMEOUT
    } else {
        NODE_CONNECT_TIMEOUT
    };
    let mut last = None;
    for i in (0..nodes.len()).map(|k| (start + k) % nodes.len()) {
        let node = &nodes[i];
        let opened =
            tokio::time::timeout(within, Link::open(&node.uri, &node.tls, &node.redacted, i))
                .await
                .unwrap_or_else(|_| Err(no_answer(&node.redacted, within)));
        match opened {
            Ok(link) => return Ok((i, link)),
            // The same files for every node: the next would refuse them too.
            Err(error @ BrokerError::Tls { .. }) => return Err(error),
            Err(error) => {
                if nodes.len() > 1 {
                    tracing::debug!(url = %node.redacted, error = %error, "node not reachable, trying the next");
                }
                last = Some(error);
            }
        }
    }
    let last =
        last.unwrap_or_else(|| super::unreachable(String::new(), "no node to connect to".into()));
    if nodes.len() == 1 {
        return Err(last);
    }
    // Name every node; the last one's error says why (the others' are in the debug log).
    Err(super::unreachable(display(nodes), Box::new(last)))
}

/// The nodes as logs show them: their redacted URLs, separated by commas.
pub(super) fn display(nodes: &[Node]) -> String {
    nodes
        .iter()
        .map(|n| n.redacted.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::{PUBLISHER_FRAME_MAX, parse};
    use cronq_shared::endpoints::Tls;

    #[test]
    fn takes_a_list_and_redacts_each_url() {
        let nodes = parse(
            "amqp://a:secret1@h1:5672/%2f, amqp://b:secret2@h2:5673/%2f,amqps://c:secret3@h3/v",
            &Tls::default(),
            None,
        )
        .unwrap();
        let mut shown: Vec<&str> = nodes.iter().map(|n| n.redacted.as_str()).collect();
        shown.sort_unstable();
        assert_eq!(
            shown,
            [
                "amqp://***@h1:5672/%2f",
                "amqp://***@h2:5673/%2f",
                "amqps://***@h3/v"
            ]
        );
        assert!(nodes.iter().all(|n| n.uri.query.heartbeat == Some(10)));
        assert!(nodes.iter().all(|n| n.uri.query.frame_max.is_none()));
    }

    #[test]
    fn a_publisher_asks_for_small_frames_unless_the_url_sets_its_own() {
        let nodes = parse(
            "amqp://a:s@h1/%2f",
            &Tls::default(),
            Some(PUBLISHER_FRAME_MAX),
        )
        .unwrap();
        assert_eq!(nodes[0].uri.query.frame_max, Some(32 * 1024));
        let nodes = parse(
            "amqp://a:s@h1/%2f?heartbeat=30&frame_max=131072",
            &Tls::default(),
            Some(PUBLISHER_FRAME_MAX),
        )
        .unwrap();
        assert_eq!(nodes[0].uri.query.heartbeat, Some(30));
        assert_eq!(nodes[0].uri.query.frame_max, Some(131_072));
    }

    #[test]
    fn refuses_a_bad_element_without_echoing_credentials() {
        let err = parse(
            "amqp://a:secret1@h1/%2f,,amqp://b:secret2@h2/%2f",
            &Tls::default(),
            None,
        )
        .err()
        .unwrap();
        let text = format!("{err}: {}", std::error::Error::source(&err).unwrap());
        assert!(text.contains("URL 2 of the 3"), "{text}");
        assert!(!text.contains("secret"), "{text}");
        let err = parse("http://x:secret@h", &Tls::default(), None)
            .err()
            .unwrap();
        let text = format!("{err}: {}", std::error::Error::source(&err).unwrap());
        assert!(text.contains("not a valid AMQP URL: expected"), "{text}");
        assert!(!text.contains("secret"), "{text}");
    }

    #[test]
    fn spreads_a_fleet_over_the_nodes() {
        let list = "amqp://h1/%2f,amqp://h2/%2f,amqp://h3/%2f";
        let firsts: std::collections::BTreeSet<String> = (0..200)
            .map(|_| {
                parse(list, &Tls::default(), None).unwrap()[0]
                    .redacted
                    .clone()
            })
            .collect();
        assert_eq!(firsts.len(), 3, "each node comes first for some process");
    }
}
