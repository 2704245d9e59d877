//! `GET/PUT/DELETE /api/v1/jobs/{job}` on a real `cronq dashboard` over Redis: create,
//! update with `If-Match` (412 when stale, and for the loser of two racing updates), delete; 409 for a file job, 413 for a body over
//! 1 MiB, 400 for an inline handler, 422 for an unknown handler name, 401 without the
//! token; the CLI's `cronq job history` shows what the API wrote.

use reqwest::StatusCode;
use serde_json::Value;

use crate::support::dashboard::{self, TOKEN};
use crate::support::{TestEnv, scoped};

async fn send(
    method: reqwest::Method,
    url: &str,
    token: bool,
    headers: &[(&str, &str)],
    body: Option<String>,
) -> (StatusCode, Option<String>, Value) {
    let mut req = reqwest::Client::new().request(method, url);
    if token {
        req = req.bearer_auth(TOKEN);
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(body) = body {
        req = req.header("content-type", "application/toml").body(body);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    let etag = resp
        .headers()
        .get("etag")
        .map(|v| v.to_str().unwrap().to_owned());
    let text = resp.text().await.unwrap_or_default();
    (
        status,
        etag,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn runtime_jobs_through_the_http_api() {
    scoped("dash-jobs-api", |env: TestEnv| async move {
        let config = env.write_config(
            "cronq.toml",
            "[handlers.append]\ncommand = [\"/bin/true\"]\n\n[[job]]\nname = \"tick\"\nschedule = \"@hourly\"\nhandler = \"append\"\n",
        );
        let config = config.to_string_lossy().into_owned();
        let d = dashboard::start(&env, "dashboard", &["dashboard", "--config", &config], "--addr", true).await;
        let doc = d.json("/api/v1/openapi.json").await;
        assert!(doc["paths"]["/api/v1/jobs/{job}"]["put"]["responses"]["412"].is_object(), "{doc}");
        assert!(doc["paths"]["/api/v1/jobs/{job}"]["delete"].is_object(), "{doc}");
        let url = d.url("/api/v1/jobs/live");
        let put = reqwest::Method::PUT;
        let body = "schedule = \"@every 5s\"\nhandler = \"append\"\n".to_owned();

        let (s, _, v) = send(put.clone(), &url, false, &[], Some(body.clone())).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{v}");
        let (s, etag, v) = send(put.clone(), &url, true, &[], Some(body.clone())).await;
        assert_eq!((s, etag.as_deref()), (StatusCode::CREATED, Some("\"1\"")), "{v}");
        let (s, etag, v) = send(reqwest::Method::GET, &url, false, &[], None).await;
        assert_eq!((s, etag.as_deref()), (StatusCode::OK, Some("\"1\"")), "{v}");
        assert_eq!(v["revision"], 1);

        let changed = "schedule = \"@every 7s\"\nhandler = \"append\"\n".to_owned();
        let (s, etag, v) = send(put.clone(), &url, true, &[("if-match", "\"1\"")], Some(changed.clone())).await;
        assert_eq!((s, etag.as_deref()), (StatusCode::OK, Some("\"2\"")), "{v}");
        let (s, _, v) = send(put.clone(), &url, true, &[("if-match", "\"1\"")], Some(body.clone())).await;
        assert_eq!(s, StatusCode::PRECONDITION_FAILED, "{v}");
        // Two updates racing from the same revision: one wins, the other is told 412 and
        // changes nothing, round after round.
        for round in 0..5u32 {
            let revision = format!("\"{}\"", 2 + round);
            let bodies = [8 + round, 20 + round]
                .map(|secs| format!("schedule = \"@every {secs}s\"\nhandler = \"append\"\n"));
            let if_match = [("if-match", revision.as_str())];
            let ((s1, e1, v1), (s2, e2, v2)) = tokio::join!(
                send(put.clone(), &url, true, &if_match, Some(bodies[0].clone())),
                send(put.clone(), &url, true, &if_match, Some(bodies[1].clone())),
            );
            let next = format!("\"{}\"", 3 + round);
            let winner = match (s1, s2) {
                (StatusCode::OK, StatusCode::PRECONDITION_FAILED) => {
                    assert_eq!(e1.as_deref(), Some(next.as_str()), "{v1}");
                    8 + round
                }
                (StatusCode::PRECONDITION_FAILED, StatusCode::OK) => {
                    assert_eq!(e2.as_deref(), Some(next.as_str()), "{v2}");
                    20 + round
                }
                other => panic!("round {round}: {other:?}: {v1} / {v2}"),
            };
            let (s, etag, v) = send(reqwest::Method::GET, &url, false, &[], None).await;
            assert_eq!((s, etag.as_deref()), (StatusCode::OK, Some(next.as_str())), "{v}");
            assert!(v.to_string().contains(&format!("@every {winner}s")), "round {round}: {v}");
        }
        let (s, _, v) = send(put.clone(), &url, true, &[("if-none-match", "*")], Some(body.clone())).await;
        assert_eq!(s, StatusCode::PRECONDITION_FAILED, "create-only on an existing job: {v}");

        let (s, _, v) = send(put.clone(), &d.url("/api/v1/jobs/tick"), true, &[], Some(body.clone())).await;
        assert_eq!(s, StatusCode::CONFLICT, "{v}");
        assert!(v.to_string().contains("cronq.toml"), "names the file: {v}");

        let big = format!("{body}payload = {{ blob = \"{}\" }}\n", "x".repeat((1 << 20) + 10));
        let (s, _, _) = send(put.clone(), &url, true, &[], Some(big)).await;
        assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);

        let inline = "schedule = \"@hourly\"\ncommand = [\"/bin/rm\", \"-rf\", \"/\"]\n".to_owned();
        let (s, _, v) = send(put.clone(), &d.url("/api/v1/jobs/evil"), true, &[], Some(inline)).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
        assert!(v.to_string().contains("a runtime job cannot carry its handler"), "{v}");
        let bad = "schedule = \"61 * * * *\"\nhandler = \"append\"\n".to_owned();
        let (s, _, v) = send(put.clone(), &d.url("/api/v1/jobs/bad"), true, &[], Some(bad)).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
        assert!(v.to_string().contains("schedule"), "{v}");
        let unknown = "schedule = \"@hourly\"\nhandler = \"apend\"\n".to_owned();
        let (s, _, v) = send(put.clone(), &d.url("/api/v1/jobs/typo"), true, &[], Some(unknown.clone())).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
        let (s, _, v) = send(put.clone(), &d.url("/api/v1/jobs/typo?allow_unknown_handler=true"), true, &[], Some(unknown)).await;
        assert_eq!(s, StatusCode::CREATED, "{v}");

        let del = reqwest::Method::DELETE;
        let (s, _, v) = send(del.clone(), &url, true, &[("if-match", "\"1\"")], None).await;
        assert_eq!(s, StatusCode::PRECONDITION_FAILED, "{v}");
        let (s, _, v) = send(del.clone(), &url, true, &[("if-match", "\"7\"")], None).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        let (s, _, v) = send(reqwest::Method::GET, &url, false, &[], None).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
        let (s, _, v) = send(del, &url, true, &[], None).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{v}");

        let out = env
            .cronq()
            .args(["--config", &config, "job", "history", "live"])
            .output()
            .unwrap();
        let history = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(
            history.lines().filter(|l| l.contains(" by admin at ")).count(),
            8,
            "{history}"
        );
    })
    .await;
}
