//! The `http` handler: one request per attempt with the message JSON as body, the attempt's
//! fencing token in `X-Cronq-Fence`, and the `traceparent` header when the occurrence is
//! traced; any 2xx status is success. A failure keeps the status and the start of the
//! response body in its error; every answer's status and the first [`HTTP_BODY_LIMIT`]
//! bytes of its body are
//! the attempt's output ([`Capture`]), the URL and header values masked.
//!
//! Invariant: errors show the URL redacted, and a URL given from the environment or a file
//! only by its scheme, host and port (it may carry a token in its path or query); header
//! values never.

use std::time::Duration;

use cronq_shared::causes::causes;
use cronq_shared::config::{HttpHandler, Origin, Secret};
use cronq_shared::message::Occurrence;
use cronq_shared::redacted::Redacted;
use cronq_shared::runlog::{HTTP_BODY_LIMIT, RunOutput};
use tokio_util::sync::CancellationToken;

use super::Capture;

/// The header carrying the attempt's fencing token (docs/consumer.md "Fencing tokens").
const FENCE_HEADER: &str = "X-Cronq-Fence";

/// How much of a failed response's body goes into the error.
const SNIPPET_BYTES: usize = 512;

/// Sends the request for `occ`; gives up after `timeout` or when `token` is cancelled.
pub(crate) async fn run(
    h: &HttpHandler,
    client: &reqwest::Client,
    occ: &Occurrence,
    fence: u64,
    timeout: Duration,
    token: CancellationToken,
    capture: &Capture,
) -> Result<(), String> {
    let url = shown(&h.url);
    let method = reqwest::Method::from_bytes(h.method.as_bytes())
        .map_err(|_| format!("{:?} is not an HTTP method", h.method))?;
    let mut req = client
        .request(method.clone(), h.url.expose())
        .timeout(timeout)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(FENCE_HEADER, fence)
        .body(occ.encode());
    for (name, value) in &h.headers {
        req = req.header(name, value.expose());
    }
    // Well formed (`crate::traces`): a valid header value.
    if let Some(traceparent) = &occ.traceparent {
        req = req.header("traceparent", traceparent);
    }
    let send = async {
        let resp = req
            .send()
            .await
            .map_err(|e| format!("{method} {url} failed: {}", causes(&e.without_url())))?;
        let status = resp.status();
        if status.is_success() && capture.limit() == 0 {
            return Ok(());
        }
        let (body, cut) = head(resp, HTTP_BODY_LIMIT).await;
        capture.keep(
            RunOutput {
                http_status: Some(status.as_u16()),
                http_body: String::from_utf8_lossy(&body).into_owned(),
                truncated: cut,
                ..RunOutput::default()
            },
            std::iter::once(h.url.expose()).chain(h.headers.iter().map(|(_, v)| v.expose())),
        );
        if status.is_success() {
            return Ok(());
        }
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

/// The first `limit` bytes of `resp`'s body (what arrived, if it broke off), and whether
/// there was more; the rest is not read.
async fn head(mut resp: reqwest::Response, limit: usize) -> (Vec<u8>, bool) {
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = resp.chunk().await {
        body.extend_from_slice(&chunk);
        if body.len() > limit {
            body.truncate(limit);
            return (body, true);
        }
    }
    (body, false)
}

/// The URL as errors show it: redacted when inline, scheme, host and port with its origin
/// when it came from the environment or a file.
fn shown(url: &Secret) -> String {
    if *url.origin() == Origin::Inline {
        return Redacted(url.expose()).to_string();
    }
    match reqwest::Url::parse(url.expose()) {
        Ok(u) => format!(
            "{}://{}{} (URL {url})",
            u.scheme(),
            u.host_str().unwrap_or_default(),
            u.port().map(|p| format!(":{p}")).unwrap_or_default()
        ),
        Err(_) => format!("the URL {url}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cronq_shared::config::{Config, Handler};

    #[test]
    fn a_url_from_a_file_shows_its_origin_only() {
        let inline = Secret::inline("https://app:pw@example.com:8443/hook?token=t0k");
        assert_eq!(
            shown(&inline),
            "https://***@example.com:8443/hook?token=t0k"
        );
        let file = std::env::temp_dir().join(format!("cronq-url-{}", std::process::id()));
        std::fs::write(&file, "https://app:pw@example.com:8443/hook?token=t0k\n").unwrap();
        let toml = format!(
            "[[job]]\nname = \"a\"\nschedule = \"@every 1s\"\nhttp = {{ url = {{ file = \"{}\" }} }}\n",
            file.display()
        );
        let config = Config::from_toml(&toml, std::path::Path::new("cronq.toml")).unwrap();
        std::fs::remove_file(&file).unwrap();
        let Some(Handler::Http(h)) = &config.jobs[0].handler else {
            panic!("an http handler");
        };
        assert_eq!(
            h.url.expose(),
            "https://app:pw@example.com:8443/hook?token=t0k"
        );
        assert_eq!(
            shown(&h.url),
            format!(
                "https://example.com:8443 (URL from file {})",
                file.display()
            )
        );
        assert!(!format!("{config:?}").contains("t0k"));
    }
}
