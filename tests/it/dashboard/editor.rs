//! The dashboard's job editor through a real process, over RabbitMQ and Redis (`cronq
//! dashboard --tokens-file`) and on a standalone's data file (`cronq standalone
//! --dashboard-addr --tokens-file`), driven as a browser does: log in, read the form's CSRF
//! token, post the form. A preview with a bad schedule shows the problem beside the
//! schedule field and stores nothing; a preview shows the next fire times of the edited
//! schedule; an admin creates a job (then in `cronq job get`, on the Jobs page marked
//! runtime, on its page; the audit log names the token); a save at a stale revision is
//! refused naming who changed the job meanwhile and overwrites nothing; an edit at the
//! current revision is saved; a delete needs its confirmation, then the job is gone from
//! the Jobs page and the CLI. An operator sees no New, Edit or Delete and is answered 403
//! posting the forms; a file job's page says it is read-only.

use chrono::Datelike as _;
use reqwest::StatusCode;
use serde_json::Value;

use super::roles::{
    ADMIN, JOBS, OPERATOR, cli_as_alice, data_file_with_tokens, fleet_with_tokens, page, send,
    session,
};
use crate::support::dashboard::{self, Dashboard};
use crate::support::data_file::DataFile;
use crate::support::producer_process::LEADER;
use crate::support::{TestEnv, scoped};

/// The CSRF token in a page of a session.
fn csrf_of(html: &str) -> String {
    html.split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the page has the session's CSRF token")
        .to_owned()
}

/// POSTs `fields` as a form to `path` with the session cookie, not following a redirect:
/// the status, the `Location` and the page.
async fn post_form(
    d: &Dashboard,
    path: &str,
    session: &str,
    fields: &[(&str, &str)],
) -> (StatusCode, String, String) {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let resp = client
        .post(d.url(path))
        .header("cookie", session)
        .form(fields)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let location = resp
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (status, location, resp.text().await.unwrap())
}

/// `cronq job get NAME --json` on the same state: the revision, or `None` when the CLI
/// says there is no such job.
fn job_get(env: &TestEnv, target: &[String], name: &str) -> Option<Value> {
    let out = env
        .cronq()
        .args(target)
        .args(["job", "get", name, "--json"])
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| serde_json::from_str(&String::from_utf8_lossy(&out.stdout)).unwrap())
}

/// The audit entries of `job`, newest first, as `(who, action, outcome)`.
async fn audit_of(d: &Dashboard, job: &str) -> Vec<(String, String, String)> {
    let (s, v) = send(
        d,
        reqwest::Method::GET,
        &format!("/api/v1/audit?job={job}"),
        ADMIN,
        &[],
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let t = |e: &Value, k: &str| e[k].as_str().unwrap_or_default().to_owned();
    v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (t(e, "who"), t(e, "action"), t(e, "outcome")))
        .collect()
}

fn entry(who: &str, action: &str, outcome: &str) -> (String, String, String) {
    (who.to_owned(), action.to_owned(), outcome.to_owned())
}

/// The whole scenario against a dashboard `d` started with the tokens file; `target` are
/// the CLI's flags for the same state.
async fn editor(env: &TestEnv, d: &Dashboard, target: &[String]) {
    let admin = session(d, ADMIN).await;
    let operator = session(d, OPERATOR).await;

    // The admin sees "New job"; its form lists the config's handlers.
    let (s, html) = page(d, "/jobs", &admin).await;
    assert_eq!(s, StatusCode::OK);
    assert!(html.contains("id=\"new-job\""), "{html}");
    let (s, form) = page(d, "/jobs/new", &admin).await;
    assert_eq!(s, StatusCode::OK, "{form}");
    assert!(
        form.contains("<option value=\"ok\""),
        "the handlers: {form}"
    );
    let csrf = csrf_of(&form);

    // A preview with a bad schedule: the problem beside the schedule field, nothing stored.
    let bad = [
        ("csrf", csrf.as_str()),
        ("new", "1"),
        ("revision", "0"),
        ("name", "made"),
        ("schedule", "61 * * * *"),
        ("handler", "ok"),
        ("action", "preview"),
    ];
    let (s, _, html) = post_form(d, "/ui/editor", &admin, &bad).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{html}");
    let beside = html
        .split("data-field=\"schedule\" role=\"alert\">")
        .nth(1)
        .unwrap_or_else(|| panic!("no error beside the schedule: {html}"));
    assert!(beside.contains("61"), "{html}");
    assert!(!html.contains("id=\"preview-fires\""), "{html}");
    assert!(job_get(env, target, "made").is_none(), "a preview stored");

    // A save naming a handler nobody offers: refused beside the handler, nothing stored.
    let mut unserved = bad.to_vec();
    unserved[4] = ("schedule", "@daily");
    unserved[5] = ("handler_name", "nobody");
    unserved[6] = ("action", "save");
    let (s, _, html) = post_form(d, "/ui/editor", &admin, &unserved).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{html}");
    let beside = html
        .split("data-field=\"handler\" role=\"alert\">")
        .nth(1)
        .unwrap_or_else(|| panic!("no error beside the handler: {html}"));
    assert!(
        beside.contains("nobody") && beside.contains("tick"),
        "{html}"
    );
    assert!(
        job_get(env, target, "made").is_none(),
        "an unserved job stored"
    );

    // A preview of a valid job: the next fire times of its schedule, in UTC and its zone.
    let year = chrono::Utc::now().year();
    let good = [
        ("csrf", csrf.as_str()),
        ("new", "1"),
        ("revision", "0"),
        ("name", "made"),
        ("schedule", "0 0 1 1 *"),
        ("timezone", "Europe/Berlin"),
        ("handler", "ok"),
        ("payload", "{ region = \"cn\" }"),
        ("max_attempts", "2"),
        ("extra", "catchup_window = \"2h\""),
        ("action", "preview"),
    ];
    let (s, _, html) = post_form(d, "/ui/editor", &admin, &good).await;
    assert_eq!(s, StatusCode::OK, "{html}");
    assert!(html.contains("id=\"preview-fires\""), "{html}");
    for y in [year, year + 1] {
        assert!(
            html.contains(&format!("{y}-12-31T23:00:00Z"))
                && html.contains(&format!("{}-01-01T00:00:00+01:00", y + 1)),
            "the fire of {}-01-01 in UTC and Berlin: {html}",
            y + 1
        );
    }
    assert!(job_get(env, target, "made").is_none(), "a preview stored");

    // An operator sees no New, gets 403 for the form and for posting it.
    let (_, html) = page(d, "/jobs", &operator).await;
    assert!(!html.contains("id=\"new-job\""), "{html}");
    let (s, _) = page(d, "/jobs/new", &operator).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (_, html) = page(d, "/jobs/tick", &operator).await;
    let operator_csrf = csrf_of(&html);
    let mut sneaky = good.to_vec();
    sneaky[0] = ("csrf", &operator_csrf);
    sneaky[10] = ("action", "save");
    let (s, _, html) = post_form(d, "/ui/editor", &operator, &sneaky).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{html}");
    assert!(
        job_get(env, target, "made").is_none(),
        "an operator created"
    );

    // The admin saves: the job's page, the CLI, the Jobs page, the audit log.
    let mut save = good.to_vec();
    save[10] = ("action", "save");
    let (s, location, html) = post_form(d, "/ui/editor", &admin, &save).await;
    assert_eq!(s, StatusCode::SEE_OTHER, "{html}");
    assert!(location.starts_with("/jobs/made?msg="), "{location}");
    let got = job_get(env, target, "made").expect("created");
    assert_eq!(got["revision"], 1, "{got}");
    assert_eq!(got["by"], "ada", "{got}");
    let spec = got["spec"].as_str().unwrap();
    assert!(
        spec.contains("schedule = \"0 0 1 1 *\"")
            && spec.contains("timezone = \"Europe/Berlin\"")
            && spec.contains("max_attempts = 2")
            && spec.contains("region = \"cn\"")
            && spec.contains("catchup_window = \"2h\""),
        "{got}"
    );
    let (s, html) = page(d, "/jobs", &admin).await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        html.contains("data-job=\"made\" data-runtime=\"1\"") && html.contains("runtime r1"),
        "the runtime job on the Jobs page: {html}"
    );
    let (s, html) = page(d, "/jobs/made", &admin).await;
    assert_eq!(s, StatusCode::OK, "{html}");
    assert!(
        html.contains("id=\"ownership\"")
            && html.contains("id=\"revision\">1<")
            && html.contains("id=\"edit\"")
            && html.contains("id=\"delete\"")
            && html.contains(&format!("{year}-12-31T23:00:00Z")),
        "the runtime job's page: {html}"
    );
    assert_eq!(
        audit_of(d, "made").await,
        [
            entry("ada", "job.create", "done"),
            entry("otto", "job.create", "refused"),
            entry("ada", "job.create", "refused"),
        ]
    );

    // An operator sees the job and its operator actions, but no Edit or Delete, and
    // cannot delete it.
    let (s, html) = page(d, "/jobs/made", &operator).await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        html.contains("id=\"trigger\"")
            && !html.contains("id=\"edit\"")
            && !html.contains("id=\"delete\""),
        "{html}"
    );
    let (s, _) = page(d, "/jobs/made/edit", &operator).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    for action in ["pause", "resume"] {
        let (s, location, html) = post_form(
            d,
            &format!("/ui/jobs/made/{action}"),
            &operator,
            &[("csrf", &operator_csrf)],
        )
        .await;
        assert_eq!(s, StatusCode::SEE_OTHER, "{html}");
        assert!(
            location.contains("msg="),
            "{action} a runtime job: {location}"
        );
    }
    let (s, _, html) = post_form(
        d,
        "/ui/jobs/made/delete",
        &operator,
        &[
            ("csrf", &operator_csrf),
            ("revision", "1"),
            ("confirm", "1"),
        ],
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{html}");

    // A file job: read-only here.
    let (_, html) = page(d, "/jobs/tick", &admin).await;
    assert!(
        html.contains("read-only here") && !html.contains("id=\"edit\""),
        "{html}"
    );

    // The edit form holds the job's fields at its revision.
    let (s, html) = page(d, "/jobs/made/edit", &admin).await;
    assert_eq!(s, StatusCode::OK, "{html}");
    assert!(
        html.contains("name=\"revision\" value=\"1\"")
            && html.contains("value=\"0 0 1 1 *\"")
            && html.contains("catchup_window = &quot;2h&quot;"),
        "{html}"
    );
    // Its plan (as `cronq plan`'s): unchanged.
    assert!(
        html.contains("id=\"preview-plan\"")
            && html.contains("Nothing: the job's definition is unchanged."),
        "{html}"
    );

    // Meanwhile alice changes the job with the CLI: a save at revision 1 is refused, naming
    // her, and overwrites nothing.
    let file = env.dir.join("made.toml");
    std::fs::write(
        &file,
        "[[job]]\nname = \"made\"\nschedule = \"@daily\"\nhandler = \"ok\"\n",
    )
    .unwrap();
    cli_as_alice(
        env,
        target,
        &["job", "apply", "-f", &file.to_string_lossy()],
    );
    let edit = [
        ("csrf", csrf.as_str()),
        ("revision", "1"),
        ("name", "made"),
        ("schedule", "0 5 * * *"),
        ("handler", "ok"),
        ("action", "save"),
    ];
    // A preview against revision 2 (`@daily`): the one occurrence of the next 24 hours moves
    // from 00:00 to 05:00 UTC.
    let mut preview = edit.to_vec();
    preview[1] = ("revision", "2");
    preview[5] = ("action", "preview");
    let (s, _, html) = post_form(d, "/ui/editor", &admin, &preview).await;
    assert_eq!(s, StatusCode::OK, "{html}");
    let plan = html
        .split("id=\"preview-plan\"")
        .nth(1)
        .unwrap_or_else(|| panic!("no plan: {html}"));
    let plan = plan.split("</section>").next().unwrap();
    assert!(
        plan.contains("class=\"plan-change\">changed<")
            && plan.matches("moves: ").count() == 1
            && plan.contains("T00:00:00Z")
            && plan.contains("T05:00:00Z")
            && !plan.contains("appears")
            && !plan.contains("disappears"),
        "{plan}"
    );
    let (s, _, html) = post_form(d, "/ui/editor", &admin, &edit).await;
    assert_eq!(s, StatusCode::PRECONDITION_FAILED, "{html}");
    assert!(
        html.contains("changed meanwhile by alice@") && html.contains("(revision 2)"),
        "{html}"
    );
    let got = job_get(env, target, "made").unwrap();
    assert_eq!(got["revision"], 2, "{got}");
    assert!(got["spec"].as_str().unwrap().contains("@daily"), "{got}");

    // At the current revision, the edit is saved.
    let mut edit = edit.to_vec();
    edit[1] = ("revision", "2");
    let (s, location, html) = post_form(d, "/ui/editor", &admin, &edit).await;
    assert_eq!(s, StatusCode::SEE_OTHER, "{html}");
    assert!(location.starts_with("/jobs/made?msg="), "{location}");
    let got = job_get(env, target, "made").unwrap();
    assert_eq!(got["revision"], 3, "{got}");
    assert!(got["spec"].as_str().unwrap().contains("0 5 * * *"), "{got}");

    // Delete: refused unconfirmed, then done; gone from the Jobs page and the CLI.
    let (s, location, _) = post_form(
        d,
        "/ui/jobs/made/delete",
        &admin,
        &[("csrf", &csrf), ("revision", "3")],
    )
    .await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    assert!(location.contains("err="), "{location}");
    assert!(
        job_get(env, target, "made").is_some(),
        "deleted unconfirmed"
    );
    let (s, location, html) = post_form(
        d,
        "/ui/jobs/made/delete",
        &admin,
        &[("csrf", &csrf), ("revision", "3"), ("confirm", "1")],
    )
    .await;
    assert_eq!(s, StatusCode::SEE_OTHER, "{html}");
    assert!(location.starts_with("/jobs?msg="), "{location}");
    assert!(job_get(env, target, "made").is_none(), "not deleted");
    let (_, html) = page(d, "/jobs", &admin).await;
    assert!(
        !html.contains("data-job=\"made\"") && html.contains("data-job=\"tick\""),
        "{html}"
    );
    let (s, _) = page(d, "/jobs/made", &admin).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let audit = audit_of(d, "made").await;
    assert_eq!(
        audit[..3],
        [
            entry("ada", "job.delete", "done"),
            entry("ada", "job.update", "done"),
            entry("ada", "job.update", "refused"),
        ],
        "{audit:?}"
    );
    assert!(
        audit[3].0.starts_with("alice@") && audit[4] == entry("otto", "job.delete", "refused"),
        "{audit:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_editor_over_rabbitmq_and_redis() {
    scoped("editor-fleet", |env: TestEnv| async move {
        let (d, target) = fleet_with_tokens(&env).await;
        editor(&env, &d, &target).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_editor_on_a_data_file() {
    scoped("editor-data", |env: TestEnv| async move {
        let (d, target) = data_file_with_tokens(&env).await;
        editor(&env, &d, &target).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_browser_creates_a_job_through_the_form() {
    scoped("editor-browser", |env: TestEnv| async move {
        let file = DataFile::new(&env, &format!("{LEADER}\n{JOBS}"));
        let d = dashboard::standalone(&file, &[], true).await;
        let b = dashboard::Browser::start().await;
        b.goto(&d.url("/login?next=/jobs")).await;
        b.type_into("#token", dashboard::TOKEN).await;
        b.click("#login-submit").await;
        b.until_contains("id=\"new-job\"").await;
        b.click("#new-job").await;
        b.until_contains("id=\"job-form\"").await;

        // A bad schedule first: the problem beside the field; then the fixed one previewed.
        b.type_into("#name", "browsed").await;
        b.type_into("#schedule", "0 25 * * *").await;
        b.click("#handler option[value=ok]").await;
        b.click("#preview").await;
        b.until_contains("data-field=\"schedule\"").await;
        let field = b
            .client
            .find(fantoccini::Locator::Css("#schedule"))
            .await
            .unwrap();
        field.clear().await.unwrap();
        field.send_keys("0 9 * * *").await.unwrap();
        b.type_into("#timezone", "Asia/Tokyo").await;
        b.click("#preview").await;
        let page = b.until_contains("id=\"preview-fires\"").await;
        assert!(
            page.contains("T00:00:00Z") && page.contains("T09:00:00+09:00"),
            "09:00 in Tokyo is 00:00 UTC: {page}"
        );
        assert!(!page.contains("data-field=\"schedule\""), "{page}");
        b.screenshot(&env, "editor").await;

        // Saved: the job's page, and the CLI sees it.
        b.click("#save").await;
        let page = b.until_contains("id=\"ownership\"").await;
        assert!(
            page.contains("created job") && page.contains("browsed"),
            "{page}"
        );
        let got = job_get(&env, &file.target(), "browsed").expect("created through the browser");
        assert_eq!(got["by"], "admin", "{got}");
        assert!(
            got["spec"]
                .as_str()
                .unwrap()
                .contains("timezone = \"Asia/Tokyo\""),
            "{got}"
        );
        b.quit().await;
    })
    .await;
}
