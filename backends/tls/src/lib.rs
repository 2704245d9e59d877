//! The TLS files of every connection to RabbitMQ (`amqps://`) and Redis (`rediss://`,
//! `rediss+sentinel://`) read and checked ([`load`]), and a failed handshake explained
//! ([`diagnose`]): the connection plumbing both network backends share, on rustls. The
//! settings themselves ([`Tls`]) and what a refusal means ([`TlsRefusal`]) are the
//! contract's (`cronq_shared::endpoints`).
//!
//! The rule this crate keeps: it depends on the contract only, never on a backend, and
//! holds what more than one backend needs to speak TLS; nothing here opens a connection.
//!
//! Invariants: a file that cannot be used stops the command before it connects, with a
//! [`TlsFileError`] naming the variable and the file (exit 2); the bytes of a key never
//! reach a log line, an error or a `Debug` output.

// A library: every public item documented and reachable (the workspace lints, in the
// root Cargo.toml, hold for the binary too).
#![warn(missing_docs, unreachable_pub)]

use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cronq_shared::endpoints::{PemFile, Tls, TlsRefusal};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The variable of the CA file.
pub const CA_FILE_VARIABLE: &str = "CRONQ_TLS_CA_FILE";
/// The variable of the client certificate file.
pub const CERT_FILE_VARIABLE: &str = "CRONQ_TLS_CERT_FILE";
/// The variable of the client certificate's key file.
pub const KEY_FILE_VARIABLE: &str = "CRONQ_TLS_KEY_FILE";

/// What to do about a bad CA file.
const CA_FIX: &str =
    "set it to a PEM file of the CA certificates that signed the servers' certificates";
/// What to do about a bad client certificate file.
const CERT_FIX: &str =
    "set it to the PEM file of the client certificate (and its intermediate CAs, if any)";
/// What to do about a bad key file.
const KEY_FIX: &str = "set it to the PEM file of the client certificate's private key (PKCS#8, PKCS#1 or SEC1, unencrypted)";

/// A TLS file that cannot be used (a usage error, exit 2).
#[derive(Debug, thiserror::Error)]
pub enum TlsFileError {
    /// The file cannot be read.
    #[error("{variable}: {}: cannot read the file; {fix}", path.display())]
    Read {
        /// The variable that names it.
        variable: &'static str,
        /// The file.
        path: PathBuf,
        /// What to do.
        fix: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not what the variable takes.
    #[error("{variable}: {}: {problem}; {fix}", path.display())]
    Invalid {
        /// The variable that names it.
        variable: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: &'static str,
        /// What to do.
        fix: &'static str,
        /// The PEM parser's error, when it has one.
        #[source]
        source: Option<rustls::pki_types::pem::Error>,
    },
    /// A client certificate without its key, or a key without its certificate.
    #[error(
        "{set} is set without {unset}: set both (the client certificate and its private key, PEM files) or neither"
    )]
    Half {
        /// The one set.
        set: &'static str,
        /// The one missing.
        unset: &'static str,
    },
}

/// Reads and checks the TLS files: `ca` (`CRONQ_TLS_CA_FILE`), and `cert` with `key`
/// (`CRONQ_TLS_CERT_FILE`, `CRONQ_TLS_KEY_FILE`), each optional, the last two together.
///
/// # Errors
/// [`TlsFileError`] naming the variable and the file, for a file that cannot be read or
/// holds no certificate (no key), or one of `cert` and `key` without the other.
pub fn load(
    ca: Option<&Path>,
    cert: Option<&Path>,
    key: Option<&Path>,
) -> Result<Tls, TlsFileError> {
    let ca = ca
        .map(|path| certificates(CA_FILE_VARIABLE, path, CA_FIX))
        .transpose()?;
    let client = match (cert, key) {
        (None, None) => None,
        (Some(_), None) => {
            return Err(TlsFileError::Half {
                set: CERT_FILE_VARIABLE,
                unset: KEY_FILE_VARIABLE,
            });
        }
        (None, Some(_)) => {
            return Err(TlsFileError::Half {
                set: KEY_FILE_VARIABLE,
                unset: CERT_FILE_VARIABLE,
            });
        }
        (Some(cert), Some(key)) => Some((
            certificates(CERT_FILE_VARIABLE, cert, CERT_FIX)?,
            private_key(key)?,
        )),
    };
    Ok(Tls::new(ca, client))
}

fn read(variable: &'static str, path: &Path, fix: &'static str) -> Result<Vec<u8>, TlsFileError> {
    std::fs::read(path).map_err(|source| TlsFileError::Read {
        variable,
        path: path.to_owned(),
        fix,
        source,
    })
}

/// A file of one or more PEM certificates.
fn certificates(
    variable: &'static str,
    path: &Path,
    fix: &'static str,
) -> Result<PemFile, TlsFileError> {
    let pem = read(variable, path, fix)?;
    let invalid = |problem, source| TlsFileError::Invalid {
        variable,
        path: path.to_owned(),
        problem,
        fix,
        source,
    };
    let mut found = 0;
    for cert in CertificateDer::pem_slice_iter(&pem) {
        cert.map_err(|e| invalid("not a valid PEM file", Some(e)))?;
        found += 1;
    }
    if found == 0 {
        return Err(invalid(
            "holds no certificate (a PEM block -----BEGIN CERTIFICATE-----)",
            None,
        ));
    }
    Ok(PemFile {
        path: path.to_owned(),
        pem,
    })
}

/// A file holding one PEM private key.
fn private_key(path: &Path) -> Result<PemFile, TlsFileError> {
    let pem = read(KEY_FILE_VARIABLE, path, KEY_FIX)?;
    if let Err(e) = PrivateKeyDer::from_pem_slice(&pem) {
        let (problem, source) = match e {
            rustls::pki_types::pem::Error::NoItemsFound => ("holds no private key", None),
            e => ("not a valid PEM file", Some(e)),
        };
        return Err(TlsFileError::Invalid {
            variable: KEY_FILE_VARIABLE,
            path: path.to_owned(),
            problem,
            fix: KEY_FIX,
            source,
        });
    }
    Ok(PemFile {
        path: path.to_owned(),
        pem,
    })
}

/// What the rustls error somewhere in `err`'s chain (an I/O error may wrap it) says about
/// the handshake; `None` when there is none, or it says nothing an operator acts on.
pub fn diagnose(err: &(dyn Error + 'static)) -> Option<TlsRefusal> {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(refusal) = e.downcast_ref::<rustls::Error>().and_then(refusal_of) {
            return Some(refusal);
        }
        // `io::Error::source` skips the error it wraps, and a shared error (redis-rs
        // keeps its I/O errors in an `Arc`) does not downcast to its own type: look
        // into both.
        let inner: Option<&(dyn Error + 'static)> =
            if let Some(io) = e.downcast_ref::<std::io::Error>() {
                io.get_ref().map(|inner| inner as _)
            } else {
                e.downcast_ref::<Arc<dyn Error + Send + Sync>>()
                    .map(|shared| &**shared as _)
            };
        if let Some(refusal) = inner.and_then(diagnose) {
            return Some(refusal);
        }
        next = e.source();
    }
    None
}

fn refusal_of(err: &rustls::Error) -> Option<TlsRefusal> {
    use TlsRefusal as R;
    use rustls::{AlertDescription as Alert, CertificateError as Cert, Error as E};
    match err {
        E::InvalidCertificate(cert) => match cert {
            Cert::UnknownIssuer | Cert::BadSignature => Some(R::UnknownAuthority),
            Cert::NotValidForName | Cert::NotValidForNameContext { .. } => Some(R::OtherHostName),
            Cert::Expired
            | Cert::ExpiredContext { .. }
            | Cert::NotValidYet
            | Cert::NotValidYetContext { .. } => Some(R::OutOfDate),
            _ => None,
        },
        E::AlertReceived(Alert::CertificateRequired | Alert::HandshakeFailure) => {
            Some(R::ClientCertRequired)
        }
        E::AlertReceived(
            Alert::UnknownCA
            | Alert::BadCertificate
            | Alert::CertificateUnknown
            | Alert::CertificateExpired
            | Alert::AccessDenied,
        ) => Some(R::ClientCertRefused),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CERT: &str =
        "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUW3Y=\n-----END CERTIFICATE-----\n";

    fn file(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn dir(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("cronq-tls-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn nothing_set_is_the_default() {
        let tls = load(None, None, None).unwrap();
        assert!(tls.ca_pem().is_none() && tls.client_pem().is_none());
    }

    #[test]
    fn a_missing_ca_file_names_the_variable_the_file_and_the_fix() {
        let err = load(Some(Path::new("/nonexistent/ca.pem")), None, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "CRONQ_TLS_CA_FILE: /nonexistent/ca.pem: cannot read the file; set it to a PEM file of the CA certificates that signed the servers' certificates"
        );
    }

    #[test]
    fn a_file_without_certificates_is_refused() {
        let d = dir("empty");
        let path = file(&d, "ca.pem", "not a certificate\n");
        let err = load(Some(&path), None, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "CRONQ_TLS_CA_FILE: {}: holds no certificate (a PEM block -----BEGIN CERTIFICATE-----); set it to a PEM file of the CA certificates that signed the servers' certificates",
                path.display()
            )
        );
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_client_certificate_needs_its_key_and_the_key_is_never_shown() {
        let d = dir("client");
        let cert = file(&d, "client.pem", CERT);
        let err = load(None, Some(&cert), None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "CRONQ_TLS_CERT_FILE is set without CRONQ_TLS_KEY_FILE: set both (the client certificate and its private key, PEM files) or neither"
        );
        let key = file(&d, "client.key", CERT);
        let err = load(None, Some(&cert), Some(&key)).unwrap_err();
        assert!(
            err.to_string().starts_with("CRONQ_TLS_KEY_FILE: ")
                && err
                    .to_string()
                    .contains(": holds no private key; set it to"),
            "{err}"
        );
        let key = file(
            &d,
            "client.key",
            "-----BEGIN PRIVATE KEY-----\nc2VjcmV0a2V5Ynl0ZXM=\n-----END PRIVATE KEY-----\n",
        );
        let tls = load(Some(&cert), Some(&cert), Some(&key)).unwrap();
        let debug = format!("{tls:?}");
        assert!(
            !debug.contains("c2VjcmV0") && debug.contains("client.key"),
            "{debug}"
        );
        assert_eq!(tls.client_pem().unwrap().0, CERT.as_bytes());
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_rustls_error_under_an_io_error_is_diagnosed() {
        let io = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        assert_eq!(diagnose(&io), Some(TlsRefusal::UnknownAuthority));
        let alert = rustls::Error::AlertReceived(rustls::AlertDescription::CertificateRequired);
        assert_eq!(diagnose(&alert), Some(TlsRefusal::ClientCertRequired));
        let shared: Arc<dyn Error + Send + Sync> = Arc::new(std::io::Error::other(
            rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName),
        ));
        assert_eq!(diagnose(&shared), Some(TlsRefusal::OtherHostName));
        let plain = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(diagnose(&plain), None);
    }
}
