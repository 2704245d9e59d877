//! The `http` handler: one request per attempt with the message JSON as body; any 2xx
//! status is success. A failure keeps the status and the start of the response body.

use std::time::Duration;

use cronq_shared::config::HttpHandler;
use cronq_shared::message::Occurrence;
use cronq_shared::redacted::Redacted;
use tokio_util::sync::CancellationToken;

/// How much of a failed response's body goes into the error.
const SNIPPET_BYTES: usize = 512;

/// Sends the request for `occ`; gives up after `timeout` or when `token` is cancelled.
pub(crate) async fn run(
    h: &HttpHandler,
    client: &reqwest::Client,
    occ: &Occurrence,
    timeout: Duration,
    token: CancellationToken,
) -> Result<(), String> {
    let url = Redacted(&h.url);
    let method = reqwest::Method::from_bytes(h.method.as_bytes())
        .map_err(|_| format!("{:?} is not an HTTP method", h.method))?;
    let mut req = client
        .request(method.clone(), &h.url)
        .timeout(timeout)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(occ.encode());
    for (name, value) in &h.headers {
        req = req.header(name, value);
    }
    let send = async {
        let resp = req
            .send()
            .await
            .map_err(|e| format!("{method} {url} failed: {}", e.without_url()))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(());
        }
        let body = resp.bytes().await.unwrap_or_default();
        let snippet = String::from_utf8_lossy(&body[..body.len().min(SNIPPET_BYTES)])
            .trim()
            .to_owned();
        Err(format!("{method} {url} answered {status}: {snippet}"))
    };
    tokio::select! {
        r = send => r,
        () = token.cancelled() => Err(format!("{method} {url} was cancelled")),
    }
}
