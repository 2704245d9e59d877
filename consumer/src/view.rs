//! The jobs a consumer runs: those of the config in force, plus every job a reload retired
//! since the start, so that occurrences already queued for a retired job still run
//! instead of being dead-lettered as unknown. A retired job that comes back takes its new
//! definition.
//!
//! Invariant: a job once known stays runnable for the life of the consumer; the view only
//! ever changes a job's definition to the newest one seen.

use std::collections::HashSet;
use std::sync::Arc;

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
    let (tx, rx) = watch::channel(first);
    let task = async move {
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
                    tx.send_replace(keep_retired(&old, new));
                }
            }
        }
    };
    (rx, task)
}

/// `new`, with the jobs of `old` it no longer has appended.
pub(crate) fn keep_retired(old: &Config, new: Arc<Config>) -> Arc<Config> {
    let names: HashSet<&str> = new.jobs.iter().map(|j| j.name.as_str()).collect();
    let retired: Vec<_> = old
        .jobs
        .iter()
        .filter(|j| !names.contains(j.name.as_str()))
        .cloned()
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
}
