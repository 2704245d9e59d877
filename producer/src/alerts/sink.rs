//! Sending notices: one task per `[[alert]]` sink, fed through a bounded queue, so a slow
//! or failing sink delays only its own notices, never scheduling, execution or another
//! sink. Each notice is tried with backoff ([`SEND_RETRY`]) within the sink's `timeout`
//! per try, counted (`cronq_alerts_sent_total`, `cronq_alert_send_failures_total`), and
//! recorded in the audit log (action `alert`: done when sent, refused when given up).
//!
//! - `webhook`: POST of the [`Notice`] as JSON; with a `secret`, signed:
//!   `X-Cronq-Timestamp: UNIX_SECONDS` and `X-Cronq-Signature: sha256=HEX`, the
//!   HMAC-SHA-256 of `TIMESTAMP.BODY` under the secret (`docs/alerts.md` shows how to check it).
//! - `slack`: POST of `{"text": …}` to an incoming webhook.
//! - `email`: a plain-text message over SMTP (STARTTLS by default), sent by `lettre`.

use std::sync::Arc;
use std::time::Duration;

use cronq_shared::audit::{AuditLog, Entry};
use cronq_shared::config::{AlertSink, AlertTarget, EmailTarget, EmailTls};
use cronq_shared::retry::{Backoff, retry};
use hmac::{Hmac, Mac};
use lettre::message::{Mailbox, header::ContentType};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use sha2::Sha256;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::notice::Notice;

/// Notices waiting for one sink at most; past it the newest are dropped (and counted).
pub(super) const QUEUE: usize = 1000;

/// Trying one notice: waits from 1 s doubling to a minute, for ten minutes.
const SEND_RETRY: Backoff = Backoff::exponential(Duration::from_secs(1), Duration::from_secs(60))
    .within(Duration::from_secs(600));

/// The handle that queues notices for one sink.
#[derive(Debug, Clone)]
pub(super) struct Outbox {
    name: Arc<str>,
    tx: mpsc::Sender<Notice>,
}

impl Outbox {
    /// Queues `notice`; never waits. A full queue drops it, with a warning and a count.
    pub(super) fn post(&self, notice: Notice) {
        if let Err(e) = self.tx.try_send(notice) {
            metrics::counter!("cronq_alerts_dropped_total", "sink" => self.name.to_string())
                .increment(1);
            warn!(sink = %self.name, error = %e, "alert dropped: the sink's queue is full (it fails or is slow)");
        }
    }
}

/// Starts the task that sends `sink`'s notices until `token` is cancelled; returns its
/// outbox and the task.
pub(super) fn start(
    sink: &AlertSink,
    http: reqwest::Client,
    audit: Arc<dyn AuditLog>,
    token: CancellationToken,
) -> (Outbox, impl Future<Output = ()> + Send + 'static) {
    let (tx, mut rx) = mpsc::channel::<Notice>(QUEUE);
    let name: Arc<str> = Arc::from(sink.name.as_str());
    let outbox = Outbox {
        name: name.clone(),
        tx,
    };
    let sender = Sender {
        name,
        target: sink.target.clone(),
        timeout: sink.timeout,
        http,
        audit,
    };
    let task = async move {
        while let Some(notice) = token.run_until_cancelled(rx.recv()).await.flatten() {
            sender.deliver(&notice, &token).await;
        }
    };
    (outbox, task)
}

struct Sender {
    name: Arc<str>,
    target: AlertTarget,
    timeout: Duration,
    http: reqwest::Client,
    audit: Arc<dyn AuditLog>,
}

impl Sender {
    async fn deliver(&self, notice: &Notice, token: &CancellationToken) {
        let status = match notice.status {
            super::notice::Status::Firing => "firing",
            super::notice::Status::Resolved => "resolved",
        };
        let labels = [
            ("sink", self.name.to_string()),
            ("kind", notice.kind.as_str().to_owned()),
            ("status", status.to_owned()),
        ];
        let sent = retry(
            SEND_RETRY,
            token,
            || async {
                match tokio::time::timeout(self.timeout, self.send(notice)).await {
                    Ok(r) => r,
                    Err(_) => Err(format!(
                        "no answer within {}",
                        humantime::format_duration(self.timeout)
                    )),
                }
            },
            |failed| {
                metrics::counter!("cronq_alert_send_failures_total", "sink" => self.name.to_string())
                    .increment(1);
                warn!(sink = %self.name, kind = %notice.kind, error = %failed.error, failures = failed.failures, "cannot send an alert; trying again");
            },
        )
        .await;
        let entry = Entry::done("alert", "cronq", &format!("sink {}", self.name))
            .job(notice.job.as_deref())
            .detail(Some(format!(
                "{} ({} event{}): {}",
                notice.title(),
                notice.count,
                if notice.count == 1 { "" } else { "s" },
                notice.subject
            )));
        let entry = match sent {
            Ok(()) => {
                metrics::counter!("cronq_alerts_sent_total", &labels).increment(1);
                info!(sink = %self.name, kind = %notice.kind, status, job = notice.job.as_deref().unwrap_or(""), count = notice.count, "alert sent");
                entry
            }
            Err(gave_up) => {
                metrics::counter!("cronq_alerts_dropped_total", "sink" => self.name.to_string())
                    .increment(1);
                warn!(sink = %self.name, kind = %notice.kind, error = ?gave_up, "alert not sent: gave up");
                entry.refused(&format!("not sent: {gave_up:?}"))
            }
        };
        if let Err(e) = self.audit.record(&entry).await {
            debug!(sink = %self.name, error = %e, "cannot record an alert in the audit log");
        }
    }

    async fn send(&self, notice: &Notice) -> Result<(), String> {
        match &self.target {
            AlertTarget::Webhook { url, secret } => {
                let body = serde_json::to_vec(notice).map_err(|e| e.to_string())?;
                let mut request = self
                    .http
                    .post(url.expose())
                    .header(reqwest::header::CONTENT_TYPE, "application/json");
                if let Some(secret) = secret {
                    let stamp = chrono::Utc::now().timestamp().to_string();
                    request = request
                        .header("X-Cronq-Timestamp", &stamp)
                        .header("X-Cronq-Signature", sign(secret.expose(), &stamp, &body));
                }
                answered(request.body(body).send().await, url)
            }
            AlertTarget::Slack { url } => {
                let body = serde_json::json!({ "text": notice.text() });
                answered(self.http.post(url.expose()).json(&body).send().await, url)
            }
            AlertTarget::Email(email) => send_email(email, notice, self.timeout).await,
        }
    }
}

/// `sha256=HEX`: the HMAC-SHA-256 of `STAMP.BODY` under `secret`.
pub fn sign(secret: &str, stamp: &str, body: &[u8]) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes a key of any length");
    mac.update(stamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256={hex}")
}

/// A 2xx answer is a send; anything else says what came back, never the URL's secret parts.
fn answered(
    result: reqwest::Result<reqwest::Response>,
    url: &cronq_shared::config::Secret,
) -> Result<(), String> {
    let shown = match url.origin() {
        cronq_shared::config::Origin::Inline => {
            cronq_shared::redacted::Redacted(url.expose()).to_string()
        }
        _ => url.to_string(),
    };
    match result {
        Ok(r) if r.status().is_success() => Ok(()),
        Ok(r) => Err(format!("{shown} answered {}", r.status())),
        Err(e) => Err(format!("{shown}: {}", cronq_shared::causes::causes(&e))),
    }
}

async fn send_email(email: &EmailTarget, notice: &Notice, timeout: Duration) -> Result<(), String> {
    let mailbox = |text: &str| -> Result<Mailbox, String> {
        text.parse()
            .map_err(|e| format!("{text:?} is not an address: {e}"))
    };
    let mut builder = Message::builder()
        .from(mailbox(&email.from)?)
        .subject(notice.title())
        .header(ContentType::TEXT_PLAIN);
    for to in &email.to {
        builder = builder.to(mailbox(to)?);
    }
    let message = builder.body(notice.text()).map_err(|e| e.to_string())?;
    let tls = || -> Result<TlsParameters, String> {
        let mut params = TlsParameters::builder(email.host.clone());
        if let Some(path) = &email.ca_file {
            let pem = std::fs::read(path)
                .map_err(|e| format!("cannot read ca_file {}: {e}", path.display()))?;
            let cert = Certificate::from_pem(&pem)
                .map_err(|e| format!("ca_file {} is not a PEM certificate: {e}", path.display()))?;
            params = params.add_root_certificate(cert);
        }
        params.build_rustls().map_err(|e| e.to_string())
    };
    let tls = match email.tls {
        EmailTls::Starttls => Tls::Required(tls()?),
        EmailTls::Tls => Tls::Wrapper(tls()?),
        EmailTls::None => Tls::None,
    };
    let mut transport = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&email.host)
        .port(email.port)
        .tls(tls)
        .timeout(Some(timeout));
    if let (Some(user), Some(password)) = (&email.username, &email.password) {
        transport =
            transport.credentials(Credentials::new(user.clone(), password.expose().to_owned()));
    }
    transport
        .build()
        .send(message)
        .await
        .map(|_| ())
        .map_err(|e| {
            format!(
                "smtp {}:{}: {}",
                email.host,
                email.port,
                cronq_shared::causes::causes(&e)
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_the_hmac_of_stamp_dot_body() {
        // RFC 4231 test case 2's key and data, with the data cut at its first space into
        // a stamp and a body so that STAMP.BODY differs; checked against Python's hmac.
        let sig = sign("Jefe", "1796000000", br#"{"kind":"missed"}"#);
        assert!(sig.starts_with("sha256="), "{sig}");
        assert_eq!(sig.len(), "sha256=".len() + 64);
        assert_ne!(sig, sign("Jefe", "1796000001", br#"{"kind":"missed"}"#));
        assert_ne!(sig, sign("jefe", "1796000000", br#"{"kind":"missed"}"#));
    }
}
