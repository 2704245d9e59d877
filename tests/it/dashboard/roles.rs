//! Roles and the audit log through real processes, over RabbitMQ and Redis (`cronq
//! dashboard --tokens-file`) and on a standalone's data file (`cronq standalone
//! --dashboard-addr --tokens-file`): a viewer cannot pause (403), an operator cannot create
//! a job (403) but pauses, resumes, triggers, backfills and replays, an admin creates and
//! updates a job; the CLI applies a job and pauses as `user@host`; a log-in and a failed
//! one. Every action, the refused ones too, is then read back with its token's name (or
//! CLI user) and origin through `GET /api/v1/audit` and `cronq audit --json`. A tokens file
//! with a bad line is refused naming the file and the line.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::cli;
use crate::support::dashboard::{self, Dashboard};
use crate::support::data_file::DataFile;
use crate::support::producer_process::LEADER;
use crate::support::{TestEnv, scoped};

pub(super) const ADMIN: &str = "ada-secret-0123456789";
pub(super) const OPERATOR: &str = "otto-secret-0123456789";
pub(super) const VIEWER: &str = "vera-secret-0123456789";

pub(super) const JOBS: &str = "[handlers.ok]\ncommand = [\"/bin/true\"]\n\n[[job]]\nname = \"tick\"\nschedule = \"@hourly\"\nhandler = \"ok\"\n";

pub(super) fn tokens_file(env: &TestEnv) -> String {
    let path = env.dir.join("tokens");
    std::fs::write(
        &path,
        format!(
            "# the dashboard's tokens\nada admin {ADMIN}\n\notto operator {OPERATOR}\nvera viewer {VIEWER}\n"
        ),
    )
    .unwrap();
    path.to_string_lossy().into_owned()
}

/// A `cronq dashboard` over RabbitMQ and Redis started with the tokens file, and the CLI's
/// flags for the same state (`--config`).
pub(super) async fn fleet_with_tokens(env: &TestEnv) -> (Dashboard, Vec<String>) {
    let config = cli::config(env, JOBS);
    let tokens = tokens_file(env);
    let d = dashboard::start(
        env,
        "dashboard",
        &["dashboard", "--config", &config, "--tokens-file", &tokens],
        "--addr",
        false,
    )
    .await;
    (d, vec!["--config".to_owned(), config])
}

/// A standalone on a data file serving the dashboard with the tokens file, and the CLI's
/// flags for the same state (`--config`, `--data`).
pub(super) async fn data_file_with_tokens(env: &TestEnv) -> (Dashboard, Vec<String>) {
    let file = DataFile::new(env, &format!("{LEADER}\n{JOBS}"));
    let tokens = tokens_file(env);
    let d = dashboard::standalone(&file, &["--tokens-file", &tokens], false).await;
    (d, file.target())
}

/// A request with `token` and no other header, asserting it is answered `expected`: the
/// answer's body.
async fn call(
    d: &Dashboard,
    method: reqwest::Method,
    path: &str,
    token: &str,
    body: Option<String>,
    expected: StatusCode,
) -> Value {
    let (s, v) = send(d, method.clone(), path, token, &[], body).await;
    assert_eq!(s, expected, "{method} {path}: {v}");
    v
}

pub(super) async fn send(
    d: &Dashboard,
    method: reqwest::Method,
    path: &str,
    token: &str,
    headers: &[(&str, &str)],
    body: Option<String>,
) -> (StatusCode, Value) {
    let mut req = reqwest::Client::new()
        .request(method, d.url(path))
        .bearer_auth(token);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(body) = body {
        req = req.body(body);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Logs in through the form with `token`: the status of the answer to the POST, and the
/// session cookie it set (`cronq_session=…`), if any.
pub(super) async fn log_in(d: &Dashboard, token: &str) -> (StatusCode, Option<String>) {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let resp = client.get(d.url("/login")).send().await.unwrap();
    let cookie = resp
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with("cronq_login="))
        .and_then(|c| c.split(';').next())
        .expect("the login form sets its cookie")
        .to_owned();
    let html = resp.text().await.unwrap();
    let csrf = html
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the login form has its CSRF token")
        .to_owned();
    let resp = client
        .post(d.url("/login"))
        .header("cookie", cookie)
        .form(&[("csrf", csrf.as_str()), ("next", "/"), ("token", token)])
        .send()
        .await
        .unwrap();
    let session = resp
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with("cronq_session="))
        .and_then(|c| c.split(';').next())
        .map(str::to_owned);
    (resp.status(), session)
}

/// Logs in through the form with `token`, asserting it is let in: the session cookie.
pub(super) async fn session(d: &Dashboard, token: &str) -> String {
    let (s, session) = log_in(d, token).await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    session.expect("a session cookie")
}

/// GET `path` with the session cookie `session`: the status and the page.
pub(super) async fn page(d: &Dashboard, path: &str, session: &str) -> (StatusCode, String) {
    let resp = reqwest::Client::new()
        .get(d.url(path))
        .header("cookie", session)
        .send()
        .await
        .unwrap();
    (resp.status(), resp.text().await.unwrap())
}

/// `cronq ARGS` as the OS user `alice`, asserting it succeeds; its stdout.
pub(super) fn cli_as_alice(env: &TestEnv, target: &[String], args: &[&str]) -> String {
    let out = env
        .cronq()
        .env("USER", "alice")
        .args(target)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cronq {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `(who, action, job, outcome, from)` of each entry, `who` of the CLI cut to `alice@`.
fn rows(entries: &Value) -> Vec<(String, String, String, String, String)> {
    let s = |v: &Value| v.as_str().unwrap_or("").to_owned();
    entries["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            let who = s(&e["who"]);
            let who = if who.starts_with("alice@") {
                "alice@".to_owned()
            } else {
                who
            };
            (
                who,
                s(&e["action"]),
                s(&e["job"]),
                s(&e["outcome"]),
                s(&e["from"]),
            )
        })
        .collect()
}

/// The whole scenario against a dashboard `d` started with the tokens file; `target` are
/// the CLI's flags for the same state (`--config`, and `--data` for a data file).
async fn roles_and_audit(env: &TestEnv, d: &Dashboard, target: &[String]) {
    let post = reqwest::Method::POST;
    let put = reqwest::Method::PUT;
    let job = "schedule = \"@hourly\"\nhandler = \"ok\"\n".to_owned();

    // A viewer reads but cannot pause; an operator cannot create a job.
    assert_eq!(d.json("/api/v1/jobs").await["total"], 1);
    let v = call(
        d,
        post.clone(),
        "/api/v1/jobs/tick/pause",
        VIEWER,
        None,
        StatusCode::FORBIDDEN,
    )
    .await;
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("role operator or admin"),
        "{v}"
    );
    let v = call(
        d,
        put.clone(),
        "/api/v1/jobs/live",
        OPERATOR,
        Some(job.clone()),
        StatusCode::FORBIDDEN,
    )
    .await;
    assert!(v["error"].as_str().unwrap().contains("role admin"), "{v}");
    let (s, v) = send(
        d,
        reqwest::Method::GET,
        "/api/v1/jobs/live",
        VIEWER,
        &[],
        None,
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "nothing was created: {v}");

    // The operator's actions.
    let pause = json!({ "note": "maintenance" }).to_string();
    call(
        d,
        post.clone(),
        "/api/v1/jobs/tick/pause",
        OPERATOR,
        Some(pause),
        StatusCode::OK,
    )
    .await;
    call(
        d,
        post.clone(),
        "/api/v1/jobs/tick/resume",
        OPERATOR,
        None,
        StatusCode::OK,
    )
    .await;
    let v = call(
        d,
        post.clone(),
        "/api/v1/jobs/tick/trigger",
        OPERATOR,
        None,
        StatusCode::OK,
    )
    .await;
    let key = v["key"].as_str().unwrap().to_owned();
    let range = json!({ "from": "2026-01-01T00:00:00Z", "to": "2026-01-01T02:00:00Z" }).to_string();
    call(
        d,
        post.clone(),
        "/api/v1/jobs/tick/backfill",
        OPERATOR,
        Some(range),
        StatusCode::OK,
    )
    .await;
    let all = json!({ "all": true }).to_string();
    call(
        d,
        post.clone(),
        "/api/v1/dead-letters/replay",
        OPERATOR,
        Some(all),
        StatusCode::OK,
    )
    .await;

    // The admin creates and updates a job.
    call(
        d,
        put.clone(),
        "/api/v1/jobs/live",
        ADMIN,
        Some(job.clone()),
        StatusCode::CREATED,
    )
    .await;
    let changed = "schedule = \"@daily\"\nhandler = \"ok\"\n".to_owned();
    let (s, v) = send(
        d,
        put.clone(),
        "/api/v1/jobs/live",
        ADMIN,
        &[("if-match", "\"1\"")],
        Some(changed),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");

    // The CLI, as alice: apply a job, pause.
    let file = env.dir.join("applied.toml");
    std::fs::write(
        &file,
        "[[job]]\nname = \"applied\"\nschedule = \"@hourly\"\nhandler = \"ok\"\n",
    )
    .unwrap();
    let out = cli_as_alice(
        env,
        target,
        &["job", "apply", "-f", &file.to_string_lossy()],
    );
    assert!(out.contains("created job \"applied\""), "{out}");
    cli_as_alice(env, target, &["pause", "tick"]);

    // Log-ins: one with the operator's token, one with a wrong token, one with the
    // viewer's. The operator's session shows the job's actions and the Audit page; the
    // viewer's shows neither.
    let operator = session(d, OPERATOR).await;
    let (s, html) = page(d, "/jobs/tick", &operator).await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        html.contains("id=\"trigger\"") && html.contains("otto (operator)"),
        "{html}"
    );
    let (s, html) = page(d, "/audit", &operator).await;
    assert_eq!(s, StatusCode::OK, "{html}");
    assert!(
        html.contains("id=\"audit\"") && html.contains("job.create"),
        "{html}"
    );
    let (s, _) = log_in(d, "not-a-token-0123456789").await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let viewer = session(d, VIEWER).await;
    let (s, html) = page(d, "/jobs/tick", &viewer).await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        !html.contains("id=\"trigger\"")
            && !html.contains("id=\"pause\"")
            && !html.contains("id=\"resume\"")
            && html.contains("vera (viewer)"),
        "{html}"
    );
    let (s, html) = page(d, "/audit", &viewer).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{html}");

    // The audit log: viewers may not read it; operators may.
    call(
        d,
        reqwest::Method::GET,
        "/api/v1/audit",
        VIEWER,
        None,
        StatusCode::FORBIDDEN,
    )
    .await;
    let api = call(
        d,
        reqwest::Method::GET,
        "/api/v1/audit?limit=500",
        OPERATOR,
        None,
        StatusCode::OK,
    )
    .await;
    let http = "127.0.0.1";
    let o = |who: &str, action: &str, job: &str, outcome: &str, from: &str| {
        (
            who.to_owned(),
            action.to_owned(),
            job.to_owned(),
            outcome.to_owned(),
            from.to_owned(),
        )
    };
    let mut expected = vec![
        o("vera", "login", "", "done", http),
        o("-", "login", "", "refused", http),
        o("otto", "login", "", "done", http),
        o("alice@", "pause", "tick", "done", "cli"),
        o("alice@", "job.create", "applied", "done", "cli"),
        o("ada", "job.update", "live", "done", http),
        o("ada", "job.create", "live", "done", http),
        o("otto", "dlq.replay", "", "done", http),
        o("otto", "backfill", "tick", "done", http),
        o("otto", "trigger", "tick", "done", http),
        o("otto", "resume", "tick", "done", http),
        o("otto", "pause", "tick", "done", http),
        o("otto", "job.put", "live", "refused", http),
        o("vera", "pause", "tick", "refused", http),
    ];
    assert_eq!(rows(&api), expected, "{api:#}");
    let entries = api["entries"].as_array().unwrap();
    let detail = |i: usize| entries[i]["detail"].as_str().unwrap_or_default().to_owned();
    assert!(
        detail(5).contains("- schedule = \"@hourly\"")
            && detail(5).contains("+ schedule = \"@daily\""),
        "the update's diff: {}",
        detail(5)
    );
    assert!(
        detail(4).contains("+ schedule = \"@hourly\""),
        "the CLI's diff: {}",
        detail(4)
    );
    assert_eq!(detail(9), key, "a trigger's key");
    assert!(
        detail(8).contains("2026-01-01T00:00:00Z to 2026-01-01T02:00:00Z (3 occurrences)"),
        "{}",
        detail(8)
    );
    assert_eq!(detail(11), "note: maintenance");
    assert!(
        entries[12]["reason"].as_str().unwrap().starts_with("403 "),
        "{}",
        entries[12]
    );

    // The same through the CLI, filtered by job and since.
    let out = cli_as_alice(env, target, &["audit", "--json"]);
    let cli: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(rows(&cli), expected, "{cli:#}");
    let out = cli_as_alice(
        env,
        target,
        &["audit", "--job", "live", "--since", "1h", "--json"],
    );
    let live: Value = serde_json::from_str(&out).unwrap();
    expected.retain(|r| r.2 == "live");
    assert_eq!(rows(&live), expected, "{live:#}");
    let v = call(
        d,
        reqwest::Method::GET,
        "/api/v1/audit?job=live&since=2000-01-01T00:00:00Z",
        ADMIN,
        None,
        StatusCode::OK,
    )
    .await;
    assert_eq!(rows(&v), expected, "{v:#}");
}

#[tokio::test(flavor = "multi_thread")]
async fn roles_and_audit_over_rabbitmq_and_redis() {
    scoped("roles-fleet", |env: TestEnv| async move {
        let (d, target) = fleet_with_tokens(&env).await;
        roles_and_audit(&env, &d, &target).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn roles_and_audit_on_a_data_file() {
    scoped("roles-data", |env: TestEnv| async move {
        let (d, target) = data_file_with_tokens(&env).await;
        roles_and_audit(&env, &d, &target).await;
    })
    .await;
}

#[tokio::test]
async fn a_tokens_file_error_names_the_file_and_line() {
    scoped("roles-bad-file", |env: TestEnv| async move {
        let config = cli::config(&env, JOBS);
        let bad = env.dir.join("tokens");
        std::fs::write(&bad, format!("ada admin {ADMIN}\notto boss {OPERATOR}\n")).unwrap();
        let bad = bad.to_string_lossy().into_owned();
        // `cronq dashboard` with the tokens file, and the old admin token when given,
        // asserting it exits 2: its stderr.
        let refused = |admin_token: Option<&str>| {
            let mut cmd = env.cronq();
            match admin_token {
                Some(token) => cmd.env("CRONQ_DASHBOARD_TOKEN", token),
                None => cmd.env_remove("CRONQ_DASHBOARD_TOKEN"),
            };
            let out = cmd
                .args([
                    "dashboard",
                    "--config",
                    &config,
                    "--tokens-file",
                    &bad,
                    "--addr",
                    "127.0.0.1:0",
                ])
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            assert_eq!(out.status.code(), Some(2), "{stderr}");
            stderr
        };
        let stderr = refused(None);
        assert!(
            stderr.contains(&format!("tokens file {bad}, line 2: role \"boss\""))
                && stderr.contains("viewer, operator or admin"),
            "{stderr}"
        );
        assert!(!stderr.contains(OPERATOR), "a secret shown: {stderr}");
        // A tokens file and the old admin token together are refused, naming both.
        std::fs::write(&bad, format!("ada admin {ADMIN}\n")).unwrap();
        let stderr = refused(Some(ADMIN));
        assert!(
            stderr.contains("--tokens-file") && stderr.contains("CRONQ_DASHBOARD_TOKEN"),
            "{stderr}"
        );
    })
    .await;
}
