//! The TLS settings of every connection to RabbitMQ (`amqps://`) and Redis (`rediss://`,
//! `rediss+sentinel://`): the CAs trusted (`CRONQ_TLS_CA_FILE`) and the client certificate
//! given to a server that asks for one (`CRONQ_TLS_CERT_FILE` with `CRONQ_TLS_KEY_FILE`),
//! as read once, when a command starts; and [`TlsRefusal`], what a failed handshake means to
//! an operator. Reading and checking the files, and telling a refusal from a TLS library's
//! error, is the backends' (`cronq-tls`, `backends/tls`); opening the connections too (they
//! hand these files to lapin and redis-rs).
//!
//! Invariants: the bytes of a key never reach a log line, an error or a `Debug` output.

use std::fmt;
use std::path::PathBuf;

/// The TLS files of a deployment; empty (the default) when none is set: the system's roots,
/// no client certificate.
#[derive(Clone, Default)]
pub struct Tls {
    ca: Option<PemFile>,
    client: Option<ClientCert>,
}

/// A PEM file as read at start: its path (shown) and its bytes (never shown).
#[derive(Clone)]
pub struct PemFile {
    /// The file.
    pub path: PathBuf,
    /// What it held.
    pub pem: Vec<u8>,
}

/// A client certificate and its key.
#[derive(Clone)]
struct ClientCert {
    cert: PemFile,
    key: PemFile,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Paths only: a key's bytes are a secret.
        f.debug_struct("Tls")
            .field("ca_file", &self.ca.as_ref().map(|c| &c.path))
            .field("cert_file", &self.client.as_ref().map(|c| &c.cert.path))
            .field("key_file", &self.client.as_ref().map(|c| &c.key.path))
            .finish()
    }
}

impl Tls {
    /// The files as read, once checked (`cronq_tls::load` reads and checks them): `ca`, the
    /// CA certificates, and `client`, a client certificate chain with its private key.
    pub fn new(ca: Option<PemFile>, client: Option<(PemFile, PemFile)>) -> Self {
        Self {
            ca,
            client: client.map(|(cert, key)| ClientCert { cert, key }),
        }
    }

    /// The CA certificates of `CRONQ_TLS_CA_FILE` (PEM), if set.
    pub fn ca_pem(&self) -> Option<&[u8]> {
        self.ca.as_ref().map(|c| c.pem.as_slice())
    }

    /// The client certificate chain and its private key (both PEM), if set.
    pub fn client_pem(&self) -> Option<(&[u8], &[u8])> {
        self.client
            .as_ref()
            .map(|c| (c.cert.pem.as_slice(), c.key.pem.as_slice()))
    }
}

/// Why a TLS handshake with a server failed, as an operator can act on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsRefusal {
    /// The server's certificate does not chain to a CA trusted.
    UnknownAuthority,
    /// The server's certificate does not name the host connected to.
    OtherHostName,
    /// The server's certificate has expired, or is not valid yet.
    OutOfDate,
    /// The server asks for a client certificate and none was given.
    ClientCertRequired,
    /// The server refused the client certificate given.
    ClientCertRefused,
}

impl fmt::Display for TlsRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::UnknownAuthority => {
                "the server's certificate is signed by an unknown authority: set CRONQ_TLS_CA_FILE to the CA that signed it"
            }
            Self::OtherHostName => {
                "the server's certificate is for another host name: connect with a host name (or address) the certificate names"
            }
            Self::OutOfDate => {
                "the server's certificate has expired or is not valid yet: renew it (or check this machine's clock)"
            }
            Self::ClientCertRequired => {
                "the server requires a client certificate: set CRONQ_TLS_CERT_FILE and CRONQ_TLS_KEY_FILE"
            }
            Self::ClientCertRefused => {
                "the server refused the client certificate of CRONQ_TLS_CERT_FILE: give one signed by a CA the server trusts"
            }
        })
    }
}
