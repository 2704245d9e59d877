//! The generated configs the benches run: N jobs `@every 1s`, so N occurrences fall due at
//! every whole second.
//!
//! Owns: the TOML text of those configs. Invariant: job names are `PREFIX0` … `PREFIX{N-1}`,
//! unique within a config, so two benches never disagree on what "N jobs" means.

use std::fmt::Write as _;

/// What each job of an [`every_second`] config carries beyond its name and schedule.
#[derive(Debug, Clone, Copy, Default)]
pub struct Shape<'a> {
    /// Lines of a `[defaults]` section (empty: no section).
    pub defaults: &'a str,
    /// Lines added to every `[[job]]` (a handler, say).
    pub job: &'a str,
}

/// A config of `jobs` jobs named `{prefix}{i}`, each `@every 1s`, shaped by `shape`.
pub fn every_second(prefix: &str, jobs: usize, shape: Shape<'_>) -> String {
    let mut text = String::with_capacity(jobs * (48 + shape.job.len()) + shape.defaults.len());
    if !shape.defaults.is_empty() {
        let _ = writeln!(text, "[defaults]\n{}", shape.defaults.trim_end());
    }
    for i in 0..jobs {
        let _ = writeln!(
            text,
            "[[job]]\nname = \"{prefix}{i}\"\nschedule = \"@every 1s\"\n{}",
            shape.job.trim_end()
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use cronq_shared::config::{Config, Overlap};

    use super::*;

    #[test]
    fn configs_load_with_every_shape() {
        let plain = Config::from_toml(&every_second("p", 3, Shape::default()), Path::new("p.toml"))
            .unwrap();
        assert_eq!(plain.jobs.len(), 3);
        assert_eq!(plain.jobs[2].name.as_str(), "p2");
        let shaped = every_second(
            "s",
            2,
            Shape {
                defaults: "overlap = \"allow\"\n",
                job: "command = [\"/bin/true\"]\n",
            },
        );
        let config = Config::from_toml(&shaped, Path::new("s.toml")).unwrap();
        assert_eq!(config.jobs.len(), 2);
        assert!(config.jobs.iter().all(|j| j.overlap == Overlap::Allow));
    }
}
