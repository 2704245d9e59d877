//! `POST /api/v1/runs/{key}/cancel` and the job page's form, through a real `cronq
//! dashboard` over RabbitMQ and Redis and a standalone's data file serving it: a viewer is
//! refused (403), an operator's cancel of a running occurrence marks it for its consumer
//! in the operator's name, a finished one answers 409 naming its state, an unknown one 404,
//! a text that is no key 400; the page form cancels a waiting one; each request is in the
//! audit log with the token's name, done or refused.

use cronq_shared::config::Overlap;
use cronq_shared::ledger::{ClaimOutcome, Heartbeat, Ledger, State};
use reqwest::StatusCode;
use serde_json::Value;

use super::roles::{
    OPERATOR, VIEWER, data_file_with_tokens, fleet_with_tokens, page, send, session,
};
use crate::support::backends::Backend;
use crate::support::dashboard::Dashboard;
use crate::support::inspect::Inspect;
use crate::support::occurrences::{LONG, claim, claimed, end, occurrence};
use crate::support::{TestEnv, ports, scoped};

async fn post(d: &Dashboard, path: &str, token: &str) -> (StatusCode, Value) {
    send(d, reqwest::Method::POST, path, token, &[], None).await
}

async fn cancels_through_the_api(env: &TestEnv, d: &Dashboard, backend: Backend) {
    let ledger = ports::ledger(backend, env).await;
    let running = claimed(&ledger, &claim("tick", 1, 1, Overlap::Queue, LONG)).await;
    let key = occurrence("tick", 1).key.to_string();
    let path = format!("/api/v1/runs/{key}/cancel");

    let (s, v) = post(d, &path, VIEWER).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    let (s, v) = post(d, &path, OPERATOR).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["result"], "stopping", "{v}");
    assert_eq!(
        ledger.heartbeat(&running, LONG).await.unwrap(),
        Heartbeat::CancelRequested {
            by: "cancelled by otto".into()
        }
    );
    assert!(
        ledger
            .complete(&running, &end(State::Cancelled))
            .await
            .unwrap()
            .recorded
    );
    let (s, v) = post(d, &path, OPERATOR).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert_eq!(
        v["error"],
        format!("occurrence {key} already ended cancelled: there is nothing to cancel")
    );
    let unknown = occurrence("tick", 9).key.to_string();
    let (s, v) = post(d, &format!("/api/v1/runs/{unknown}/cancel"), OPERATOR).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    let (s, v) = post(d, "/api/v1/runs/nonsense/cancel", OPERATOR).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");

    // The job page's form: a waiting occurrence, cancelled before it starts.
    let holder = claimed(&ledger, &claim("tick", 2, 1, Overlap::Queue, LONG)).await;
    let waiter = claim("tick", 3, 1, Overlap::Queue, LONG);
    assert!(matches!(
        ledger.claim(&waiter).await.unwrap(),
        ClaimOutcome::Waiting { .. }
    ));
    let cookie = session(d, OPERATOR).await;
    let (_, html) = page(d, "/jobs/tick", &cookie).await;
    assert!(html.contains("Cancel occurrence"), "{html}");
    let csrf = html
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the page's CSRF token")
        .to_owned();
    let waiting = waiter.key.to_string();
    let resp = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .post(d.url("/ui/jobs/tick/cancel"))
        .header("cookie", &cookie)
        .form(&[("csrf", csrf.as_str()), ("key", waiting.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    let location = resp.headers()["location"].to_str().unwrap().to_owned();
    assert!(location.contains("msg=cancelled"), "{location}");
    let record = ledger.inspect(&waiter.key).await.unwrap();
    assert_eq!(record.state, State::Cancelled);
    assert_eq!(record.error.as_deref(), Some("cancelled by otto"));
    assert!(
        ledger
            .complete(&holder, &end(State::Succeeded))
            .await
            .unwrap()
            .recorded
    );

    // The audit log, newest first.
    let (s, audit) = send(
        d,
        reqwest::Method::GET,
        "/api/v1/audit?job=tick",
        OPERATOR,
        &[],
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{audit}");
    let rows: Vec<(String, String, String)> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "cancel")
        .map(|e| {
            let s = |v: &Value| v.as_str().unwrap_or("").to_owned();
            (s(&e["who"]), s(&e["outcome"]), s(&e["detail"]))
        })
        .collect();
    let row = |who: &str, outcome: &str, detail: &str| {
        (who.to_owned(), outcome.to_owned(), detail.to_owned())
    };
    assert_eq!(
        rows,
        [
            row("otto", "done", &waiting),
            row("otto", "refused", &unknown),
            row("otto", "refused", &key),
            row("otto", "done", &key),
            row("vera", "refused", &key),
        ],
        "{audit}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_through_the_api_over_rabbitmq_and_redis() {
    scoped("cancel-api-fleet", |env: TestEnv| async move {
        let (d, _) = fleet_with_tokens(&env).await;
        cancels_through_the_api(&env, &d, Backend::Real).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_through_the_api_on_a_data_file() {
    scoped("cancel-api-data", |env: TestEnv| async move {
        let (d, _) = data_file_with_tokens(&env).await;
        cancels_through_the_api(&env, &d, Backend::Sqlite).await;
    })
    .await;
}
