//! The reloader following a job store (`cronq_shared::reload`), on every backend: a runtime
//! job deleted is named in the configs it publishes, read from the store's change log
//! through another handle than the writer's, for `FORGET_DELETED`, then forgotten at the
//! first change after that; a deleted job written again is no longer named.

use std::sync::Arc;
use std::time::Duration;

use cronq_shared::config::Config;
use cronq_shared::reload::FORGET_DELETED;
use cronq_shared::reload::testing::{following, write};
use tokio::sync::watch;

use crate::support::backends::{Backend, on_every_backend};
use crate::support::{TestEnv, ports};

/// The runtime jobs the reloader's config names deleted.
fn deleted(config: &watch::Receiver<Arc<Config>>) -> Vec<String> {
    config
        .borrow()
        .deleted
        .iter()
        .map(|n| n.as_str().to_owned())
        .collect()
}

/// Moves the runtime's clock (the reloader's) on by `by` at once, then lets it run on: it
/// is paused only while it moves, so no call to the store waits on a paused clock (which
/// would jump to the client's timeouts).
async fn skip(by: Duration) {
    tokio::time::pause();
    tokio::time::advance(by).await;
    tokio::time::resume();
}

on_every_backend!(deleted_jobs_named_then_forgotten, "reload_deleted");

async fn deleted_jobs_named_then_forgotten(backend: Backend, env: TestEnv) {
    let (writer, followed) = ports::job_stores(backend, &env).await;
    let (mut reloader, config) = following(followed);

    write(&*writer, "gone", true).await;
    write(&*writer, "kept", true).await;
    assert!(reloader.poll().await, "two jobs written");
    assert!(deleted(&config).is_empty());
    assert!(config.borrow().job("gone").is_some());

    write(&*writer, "gone", false).await;
    assert!(reloader.poll().await, "a job deleted");
    assert_eq!(deleted(&config), ["gone"]);
    assert!(config.borrow().job("gone").is_none());

    // Written again: a job once more, no longer named deleted.
    write(&*writer, "back", true).await;
    assert!(reloader.poll().await);
    write(&*writer, "back", false).await;
    assert!(reloader.poll().await);
    assert_eq!(deleted(&config), ["back", "gone"]);
    write(&*writer, "back", true).await;
    assert!(reloader.poll().await);
    assert_eq!(deleted(&config), ["gone"]);
    assert!(config.borrow().job("back").is_some());

    skip(FORGET_DELETED - Duration::from_secs(2)).await;
    write(&*writer, "next", true).await;
    assert!(reloader.poll().await);
    assert_eq!(
        deleted(&config),
        ["gone"],
        "named until FORGET_DELETED is over"
    );
    skip(Duration::from_secs(3)).await;
    write(&*writer, "later", true).await;
    assert!(reloader.poll().await);
    assert!(
        deleted(&config).is_empty(),
        "forgotten at the first change after FORGET_DELETED"
    );
    let config = config.borrow();
    for job in ["kept", "back", "next", "later"] {
        assert!(config.job(job).is_some(), "{job} is a job");
    }
}
