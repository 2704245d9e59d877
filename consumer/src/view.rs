//! The jobs a consumer runs: those of the config in force, plus every job a reload retired
//! since the start, so that occurrences already queued for a retired job still run
//! instead of being dead-lettered as unknown. A retired job that comes back takes its new
//! definition. A runtime job deleted from the job store is not kept: its queued
//! occurrences end `cancelled` ("job deleted"), told by the store's history
//! (`crate::worker`), so a consumer of short-lived runtime jobs does not hold every one it
//! ever saw.
//!
//! Invariant: a job once known stays runnable for the life of the consumer, unless it was
//! deleted from the job store; the view only ever changes a job's definition to the
//! newest one seen.

use std::sync::Arc;

use cronq_shared::blocking::off_runtime;
use cronq_shared::config::Config;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Follows `source` into a view that keeps retired jobs; returns the view and the task
/// that keeps it up to date (ends when `token` is cancelled or `source` closes).
pub(crate) fn follow(
    mut source: watch::Receiver<Arc<Config>>,
    token: CancellationToken,
) -> (
    watch::Receiver<Arc<Config>>,
    impl Future<Output = ()> + Send + 'static,
) {
    let first = source.borrow_and_update().clone();
    let (tx, rx) = watch::channel(Arc::clone(&first));
    let task = async move {
        // The first config's index too, before the first deliveries need it (one that
        // comes sooner waits for this build rather than making its own).
        if off_runtime(move || first.index_names()).await.is_none() {
            return;
        }
        loop {
            tokio::select! {
                biased;
                () = token.cancelled() => return,
                changed = source.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let new = source.borrow_and_update().clone();
                    let old = tx.borrow().clone();
                    // Off the runtime's threads: at a million jobs, the view and its
                    // lookup index take tens of milliseconds, which deliveries must not wait.
                    let Some(view) = off_runtime(move || {
                        let view = keep_retired(&old, new);
                        view.index_names();
                        view
                    })
                    .await else {
                        return;
                    };
                    tx.send_replace(view);
                }
            }
        }
    };
    (rx, task)
}

/// `new`, with the jobs of `old` it no longer has appended (matched by name, in place
/// where the two lists agree: a change of a few jobs among a million costs no hash of
/// every name), but those deleted from the job store.
pub(crate) fn keep_retired(old: &Config, new: Arc<Config>) -> Arc<Config> {
    let retired: Vec<_> = old
        .jobs
        .iter()
        .zip(old.positions_in(&new))
        .filter(|(job, at)| at.is_none() && !new.deleted.contains(&job.name))
        .map(|(job, _)| job.clone())
        .collect();
    if retired.is_empty() {
        return new;
    }
    let mut merged = Config::clone(&new);
    merged.jobs.extend(retired);
    Arc::new(merged)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn config(jobs: &[(&str, &str)]) -> Arc<Config> {
        let text: String = jobs
            .iter()
            .map(|(name, schedule)| {
                format!("[[job]]\nname = \"{name}\"\nschedule = \"{schedule}\"\n")
            })
            .collect();
        Arc::new(Config::from_toml(&text, Path::new("cronq.toml")).unwrap())
    }

    #[test]
    fn retired_jobs_stay_and_changed_ones_take_the_new_definition() {
        let old = config(&[("a", "@every 1s"), ("b", "@every 1s")]);
        let new = config(&[("b", "@every 5s"), ("c", "@every 1s")]);
        let view = keep_retired(&old, new);
        let names: Vec<&str> = view.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["b", "c", "a"]);
        assert_eq!(view.job("b").unwrap().schedule.as_str(), "@every 5s");
    }

    #[test]
    fn a_runtime_job_deleted_from_the_store_is_not_kept() {
        let old = config(&[
            ("a", "@every 1s"),
            ("gone", "@every 1s"),
            ("dropped", "@every 1s"),
        ]);
        let mut new = Config::clone(&config(&[("a", "@every 1s")]));
        new.deleted
            .insert(cronq_shared::names::JobName::new("gone").unwrap());
        let view = keep_retired(&old, Arc::new(new));
        let names: Vec<&str> = view.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(
            names,
            ["a", "dropped"],
            "a job a reload dropped is kept, a deleted one not"
        );
    }

    #[test]
    fn jobs_that_moved_are_not_retired_and_only_the_one_gone_is_kept() {
        let names = |n: usize| -> Vec<String> { (0..n).map(|i| format!("j{i}")).collect() };
        let old_names = names(100);
        // One added first, one gone from the middle, two swapped near the end.
        let mut new_names = old_names.clone();
        new_names.remove(40);
        new_names.swap(90, 95);
        new_names.insert(0, "first".to_owned());
        fn jobs(names: &[String]) -> Vec<(&str, &str)> {
            names.iter().map(|n| (n.as_str(), "@every 1s")).collect()
        }
        let view = keep_retired(&config(&jobs(&old_names)), config(&jobs(&new_names)));
        let got: Vec<&str> = view.jobs.iter().map(|j| j.name.as_str()).collect();
        let mut want: Vec<&str> = new_names.iter().map(String::as_str).collect();
        want.push("j40");
        assert_eq!(got, want);
        assert!(view.job("j40").is_some() && view.job("first").is_some());
    }

    /// A change among many jobs: the view and its lookup index (tens of milliseconds at a
    /// million jobs) are made while the runtime's thread goes on with its other tasks.
    #[tokio::test(flavor = "current_thread")]
    async fn the_view_of_many_jobs_is_made_off_the_thread_of_the_deliveries() {
        const JOBS: usize = 20_000;
        let names: Vec<String> = (0..JOBS).map(|i| format!("j{i}")).collect();
        let jobs: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "0 0 29 2 *")).collect();
        let (source, rx) = watch::channel(config(&jobs));
        let token = CancellationToken::new();
        let (mut view, follower) = follow(rx, token.clone());
        let follower = tokio::spawn(follower);
        let counter = cronq_shared::blocking::TurnCounter::start();
        let before = counter.turns();
        source.send_replace(config(&jobs[1..]));
        view.changed().await.expect("the view follows");
        let during = counter.turns() - before;
        drop(counter);
        token.cancel();
        follower.await.expect("the follower ends");
        let view = view.borrow().clone();
        assert_eq!(view.jobs.len(), JOBS, "the job gone is kept");
        assert!(view.job("j0").is_some() && view.job("j1").is_some());
        // Were the view made on this thread, the counter would have run once or twice.
        assert!(
            during >= 10,
            "the other task ran {during} times while the view of {JOBS} jobs was made"
        );
    }
}
