//! Config parsing and validation, the entry `cronq check` uses on a TOML text
//! (`Config::from_toml_at`): never a panic; a refusal names the file; an accepted config
//! has unique job names and every schedule fires after "now" (the never-fires rule).

#![no_main]

use std::collections::HashSet;
use std::path::Path;

use chrono::{DateTime, Utc};
use cronq_shared::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let now: DateTime<Utc> = DateTime::from_timestamp(1_795_000_000, 0).expect("in range");
    match Config::from_toml_at(text, Path::new("fuzz.toml"), now) {
        Ok(config) => {
            let mut names = HashSet::new();
            for job in &config.jobs {
                assert!(
                    names.insert(job.name.as_str().to_owned()),
                    "duplicate job accepted"
                );
                assert!(
                    job.schedule.next_after(now).is_some(),
                    "job {:?}: schedule {:?} accepted but never fires",
                    job.name.as_str(),
                    job.schedule.as_str()
                );
            }
            let _ = config.queues();
            for warning in &config.warnings {
                let _ = warning.to_string();
            }
        }
        Err(err) => {
            let text = err.to_string();
            assert!(
                text.contains("fuzz.toml"),
                "an error that does not name the file: {text}"
            );
        }
    }
});
