//! The audit log (`AuditLog`): entries read back newest first (recording order within one
//! instant), whoever recorded them; filtered by job and time, capped by `limit`; entries
//! past the retention dropped when the next is recorded; on every backend.

use std::sync::Arc;
use std::time::Duration;

use chrono::{TimeDelta, Utc};
use cronq_shared::audit::{AuditLog, Entry, Filter, Outcome};

use crate::support::backends::{Backend, on_every_backend};
use crate::support::{TestEnv, ports};

/// A day: the retention the suite's logs are built with.
const DAY: Duration = Duration::from_secs(24 * 3600);

fn all() -> Filter {
    Filter {
        limit: 1000,
        ..Filter::default()
    }
}

fn actions(entries: &[Entry]) -> Vec<String> {
    entries.iter().map(|e| e.action.clone()).collect()
}

/// `x` and `y` are two processes' handles on one log.
async fn audit_suite(x: Arc<dyn AuditLog>, y: Arc<dyn AuditLog>) {
    assert!(x.list(&all()).await.unwrap().is_empty());
    let now = Utc::now();
    let at = |secs: i64| now - TimeDelta::seconds(secs);
    let mut old = Entry::done("pause", "otto", "127.0.0.1").job(Some("report"));
    old.at = at(3600);
    x.record(&old).await.unwrap();
    let mut refused = Entry::done("job.put", "vera", "10.0.0.7")
        .job(Some("report"))
        .refused("403 token \"vera\" has the role viewer: this needs the role admin");
    refused.at = at(60);
    y.record(&refused).await.unwrap();
    // Three in the same instant keep their recording order (newest first).
    let same = at(10);
    for (i, action) in ["trigger", "backfill", "resume"].into_iter().enumerate() {
        let mut e = Entry::done(action, "alice@host", "cli")
            .job(Some(if i == 1 { "other" } else { "report" }))
            .detail(Some(format!("detail {i}\nsecond line")));
        e.at = same;
        (if i % 2 == 0 { &x } else { &y }).record(&e).await.unwrap();
    }
    let login = Entry::done("login", "ada", "127.0.0.1");
    x.record(&login).await.unwrap();

    let listed = y.list(&all()).await.unwrap();
    assert_eq!(
        actions(&listed),
        ["login", "resume", "backfill", "trigger", "job.put", "pause"],
        "{listed:#?}"
    );
    assert_eq!(listed[5], old, "an entry reads back as recorded");
    assert_eq!(listed[4].outcome, Outcome::Refused);
    assert_eq!(listed[4].reason, refused.reason);
    assert_eq!(listed[2].detail.as_deref(), Some("detail 1\nsecond line"));
    assert_eq!(listed[0].job, None);

    let by_job = x
        .list(&Filter {
            job: Some("report".into()),
            ..all()
        })
        .await
        .unwrap();
    assert_eq!(actions(&by_job), ["resume", "trigger", "job.put", "pause"]);
    let recent = x
        .list(&Filter {
            since: Some(at(120)),
            ..all()
        })
        .await
        .unwrap();
    assert_eq!(
        actions(&recent),
        ["login", "resume", "backfill", "trigger", "job.put"]
    );
    let both = x
        .list(&Filter {
            job: Some("report".into()),
            since: Some(at(30)),
            limit: 1,
        })
        .await
        .unwrap();
    assert_eq!(actions(&both), ["resume"]);
    let none = x
        .list(&Filter {
            job: Some("nobody".into()),
            ..all()
        })
        .await
        .unwrap();
    assert!(none.is_empty(), "{none:?}");

    // Retention: an entry older than a day is dropped when the next is recorded.
    let mut ancient = Entry::done("pause", "otto", "127.0.0.1").job(Some("gone"));
    ancient.at = now - TimeDelta::days(2);
    x.record(&ancient).await.unwrap();
    let mut fresh = Entry::done("resume", "otto", "127.0.0.1").job(Some("gone"));
    fresh.at = Utc::now();
    y.record(&fresh).await.unwrap();
    let gone = x
        .list(&Filter {
            job: Some("gone".into()),
            ..all()
        })
        .await
        .unwrap();
    assert_eq!(
        actions(&gone),
        ["resume"],
        "the two-day-old entry is pruned: {gone:#?}"
    );
    assert_eq!(
        x.list(&all()).await.unwrap().len(),
        7,
        "nothing younger is dropped"
    );
}

on_every_backend!(audit_log, "audit_log");

async fn audit_log(backend: Backend, env: TestEnv) {
    let (x, y) = ports::audit_logs(backend, &env, DAY).await;
    audit_suite(x, y).await;
}
