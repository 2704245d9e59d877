//! The dashboard in a real browser (headless Chromium through chromedriver) over a fleet of
//! real processes: log in, pause a job with a note that is HTML (shown as text, no script
//! runs) and see it paused in `cronq jobs`, trigger a job and see its run appear without a
//! reload, replay a dead letter after a dry run, a form posted without its CSRF token
//! refused; and a second dashboard without an admin token showing no action and refusing
//! changes with 403. Each page is saved as a PNG (docs/dashboard.md's screenshots).

use reqwest::StatusCode;
use serde_json::json;

use super::jobs;
use crate::support::cli::{self, start_consumer};
use crate::support::dashboard::{self, Browser, TOKEN};
use crate::support::producer_process::producer;
use crate::support::scoped;

/// The occurrence key in a flash message `requested occurrence KEY; …`.
fn requested_key(page: &str) -> String {
    let start = page
        .find("requested occurrence ")
        .expect("the trigger's message")
        + "requested occurrence ".len();
    page[start..].split(';').next().unwrap().to_owned()
}

#[tokio::test]
async fn browser_operates_the_fleet_safely() {
    scoped("dash-browser", |env| async move {
        let config = cli::config(&env, &jobs(&env));
        producer(&env, "producer", &config);
        start_consumer(&env, &config, "c1");
        let d = dashboard::start(
            &env,
            "dashboard",
            &["dashboard", "--config", &config],
            "--addr",
            true,
        )
        .await;
        let b = Browser::start().await;

        // Not logged in: no action.
        b.goto(&d.url("/jobs/report")).await;
        assert_eq!(b.count("#pause").await, 0, "{}", b.source().await);

        // Log in.
        b.goto(&d.url("/login?next=/jobs/report")).await;
        b.type_into("#token", TOKEN).await;
        b.click("#login-submit").await;
        b.until_contains("id=\"pause\"").await;

        // Pause with an HTML note: shown as text, no script runs; `cronq jobs` sees it.
        let note = "<script>alert(1)</script>";
        b.type_into("#note", note).await;
        b.click("#pause").await;
        let page = b.until_contains("Paused since").await;
        assert!(
            page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{page}"
        );
        let shown = b
            .client
            .find(fantoccini::Locator::Css("#paused q.note"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(shown, note);
        assert!(
            b.client.get_alert_text().await.is_err(),
            "a script of the note ran"
        );
        let listed = cli::json(&env, &["jobs", "--json", "--config", &config]);
        let report = listed["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["job"] == "report")
            .unwrap();
        assert_eq!(report["paused"]["note"], note, "{listed}");
        b.click("#resume").await;
        b.until_contains("id=\"pause\"").await;

        // A form posted without (or with a wrong) CSRF token is refused, even logged in.
        let session = b
            .client
            .get_named_cookie("cronq_session")
            .await
            .expect("the session cookie");
        let http = reqwest::Client::new();
        for body in ["note=x", "note=x&csrf=forged"] {
            let resp = http
                .post(d.url("/ui/jobs/report/pause"))
                .header("cookie", format!("cronq_session={}", session.value()))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), StatusCode::FORBIDDEN, "{body}");
            assert!(resp.text().await.unwrap().contains("CSRF token"), "{body}");
        }
        let listed = cli::json(&env, &["jobs", "--json", "--config", &config]);
        assert!(
            listed["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .all(|j| j["paused"].is_null()),
            "{listed}"
        );

        // Trigger: the run appears on the page by itself (no reload: the marker stays).
        b.click("#trigger").await;
        let page = b.until_contains("requested occurrence").await;
        let key = requested_key(&page);
        b.client
            .execute("window.cronqMarker = 1; return null;", vec![])
            .await
            .unwrap();
        b.until_contains(&format!("data-key=\"{key}\"")).await;
        let marker = b
            .client
            .execute("return window.cronqMarker || 0;", vec![])
            .await
            .unwrap();
        assert_eq!(marker, json!(1), "the page was reloaded instead of updated");
        b.screenshot(&env, "job").await;

        // A dead letter: listed, a dry run first, then replayed.
        b.goto(&d.url("/jobs/broken")).await;
        b.click("#trigger").await;
        let broken = requested_key(&b.until_contains("requested occurrence").await);
        b.goto(&d.url("/dead-letters")).await;
        b.until_contains(&format!("value=\"{broken}\"")).await;
        b.screenshot(&env, "dead-letters").await;
        b.click(&format!("input[name=key][value=\"{broken}\"]"))
            .await;
        b.click("#replay-selected").await;
        let page = b.until_contains("id=\"replay-result\"").await;
        assert!(page.contains("would replay"), "{page}");
        b.click(&format!("input[name=key][value=\"{broken}\"]"))
            .await;
        b.click("input[name=dry_run]").await;
        b.click("#replay-selected").await;
        let page = b.until_contains("replayed 1 of 1 selected letters").await;
        assert!(page.contains("<td>replayed</td>"), "{page}");

        // The other pages, for the docs.
        for (path, name) in [("/", "fleet"), ("/jobs", "jobs"), ("/runs", "runs")] {
            b.goto(&d.url(path)).await;
            b.until_contains("<h1>").await;
            b.screenshot(&env, name).await;
        }

        // Times in each job's zone: the Berlin job's next fire, 01:30 UTC, shows as 02:30.
        b.goto(&d.url("/jobs")).await;
        let zone = b
            .client
            .find(fantoccini::Locator::Css("#zone"))
            .await
            .unwrap();
        zone.select_by_value("job").await.unwrap();
        let next = b
            .client
            .find(fantoccini::Locator::Css(
                "tr[data-job=report] td:nth-child(4) time",
            ))
            .await
            .unwrap();
        let shown = next.text().await.unwrap();
        assert!(shown.contains(" 02:30:00 "), "{shown}");
        let zone = b
            .client
            .find(fantoccini::Locator::Css("#zone"))
            .await
            .unwrap();
        zone.select_by_value("utc").await.unwrap();

        // Without an admin token: no action anywhere, and the API refuses changes.
        let ro = dashboard::start(
            &env,
            "read-only",
            &["dashboard", "--config", &config],
            "--addr",
            false,
        )
        .await;
        for path in ["/jobs/report", "/dead-letters", "/"] {
            b.goto(&ro.url(path)).await;
            let page = b.until_contains("read-only").await;
            assert_eq!(b.count("form[method=post]").await, 0, "{path}: {page}");
            assert_eq!(
                b.count("button#pause, button#trigger, #replay-all, input[name=key]")
                    .await,
                0,
                "{path}: {page}"
            );
        }
        let (status, v) = ro
            .post("/api/v1/jobs/report/trigger", Some(TOKEN), json!({}))
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{v}");
        b.quit().await;
    })
    .await;
}
