//! The TLS files (`CRONQ_TLS_*`, read and checked by `cronq-tls`) as redis-rs takes them,
//! for one server's client (`connect.rs`) and for the sentinels and the master they name
//! (`sentinel.rs`).

use cronq_shared::endpoints::Tls;
use redis::{ClientTlsConfig, TlsCertificates};

/// redis-rs's TLS settings from the TLS files; `None` when no file is set (the system's
/// roots, no client certificate).
pub(crate) fn certificates(tls: &Tls) -> Option<TlsCertificates> {
    let root_cert = tls.ca_pem().map(<[u8]>::to_vec);
    let client_tls = tls.client_pem().map(|(cert, key)| ClientTlsConfig {
        client_cert: cert.to_vec(),
        client_key: key.to_vec(),
    });
    (root_cert.is_some() || client_tls.is_some()).then_some(TlsCertificates {
        client_tls,
        root_cert,
    })
}
