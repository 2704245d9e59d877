//! The config a fleet or a standalone runs, recorded where its state is (the job store,
//! [`crate::jobs::JobStore::record_config`]), so that the operations commands read the
//! jobs that run instead of needing the file (`docs/operations.md`, "Which config the
//! operations commands read").
//!
//! Owns: what a record keeps of a config file ([`ConfigRecord`]), how it is made
//! ([`ConfigRecord::new`]), read back ([`ConfigRecord::load`]) and compared with another
//! file ([`Drift`]), and the rule for the list of records every backend keeps
//! ([`next_records`]).
//!
//! Invariant: a record carries no handler body and no alert sink, so no secret: the
//! `[[alert]]` sinks are left out; a job's inline handler (`command` or `http`, with `env`,
//! `user`, `group`, `cwd`, `clear_env`) and each `[handlers.NAME]` become
//! `command = [NOT_RECORDED]` ([`NOT_RECORDED`]), so that a job still has a handler and a
//! handler still has its name (the dashboard, `cronq jobs` and `cronq job apply` use
//! them); a calendar's `.ics` file is replaced by the dates read from it, so the record
//! reads the same on any machine.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use toml::{Table, Value};

use crate::config::{Config, ConfigError};
use crate::names::JobName;
use crate::registry::digest::{JobDigest, job_digest};

/// How many records of distinct configs a store keeps, newest first.
pub const KEEP: usize = 20;

/// A config's text past this size is kept in [`KEEP_LARGE`] records only: a config of a
/// million jobs is about 100 MB.
pub const LARGE: usize = 1 << 20;

/// How many records a store keeps when the newest is [`LARGE`].
pub const KEEP_LARGE: usize = 2;

/// A config file larger than this is recorded without its text (its path, digest and job
/// count only): rewriting it without its secrets would cost the leader about as much
/// memory and time as loading it (a config of 100,000 jobs is about 10 MB). The operations
/// commands then need `--config`.
pub const MAX_TEXT: usize = 8 << 20;

/// The fields of a job's inline handler, which a record replaces.
const HANDLER_FIELDS: &[&str] = &[
    "command",
    "http",
    "env",
    "user",
    "group",
    "cwd",
    "clear_env",
];

/// The top-level sections a record leaves out: alert sinks carry secrets, and no operations
/// command sends an alert.
const LEFT_OUT: &[&str] = &["alert"];

/// The command a recorded `[handlers.NAME]` has instead of its own: no operations command
/// runs a handler, and the record is never a consumer's config.
pub const NOT_RECORDED: &str = "(not recorded)";

/// A config file as loaded by a process: the resolved config and the text it came from.
#[derive(Debug, Clone)]
pub struct Load {
    /// The config, without runtime jobs.
    pub config: Arc<Config>,
    /// The file's text when it was read; empty once [`Load::lean`] dropped a large one.
    pub text: Arc<str>,
    /// [`text_digest`] of the text.
    pub digest: String,
}

impl Load {
    /// `config`, loaded from `text`.
    pub fn new(config: Arc<Config>, text: Arc<str>) -> Self {
        Self {
            digest: text_digest(&text),
            config,
            text,
        }
    }

    /// This load without its text when it is larger than [`MAX_TEXT`] (it is not
    /// recorded then): a process that keeps its loads does not keep a copy of a large file.
    pub fn lean(self) -> Self {
        if self.text.len() > MAX_TEXT {
            Self {
                text: Arc::from(""),
                ..self
            }
        } else {
            self
        }
    }
}

/// One recorded load of a config file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigRecord {
    /// The file's path, as the process that loaded it named it.
    pub path: String,
    /// The SHA-256 of the file's text (32 hex digits).
    pub digest: String,
    /// When a process first loaded this text (the first of consecutive loads of it).
    pub since: DateTime<Utc>,
    /// When it was last loaded.
    pub at: DateTime<Utc>,
    /// The instance that last loaded it.
    pub by: String,
    /// How many jobs it defines.
    pub jobs: usize,
    /// The config as TOML text, without handlers and alert sinks (see the module docs).
    pub text: String,
}

impl ConfigRecord {
    /// The record of `load`, loaded by the instance `by` at `at`.
    pub fn new(load: &Load, by: &str, at: DateTime<Utc>) -> Self {
        Self {
            path: load.config.path.display().to_string(),
            digest: load.digest.clone(),
            since: at,
            at,
            by: by.to_owned(),
            jobs: load.config.jobs.len(),
            text: if load.text.is_empty() || load.text.len() > MAX_TEXT {
                String::new()
            } else {
                without_secrets(&load.text, &load.config)
            },
        }
    }

    /// The recorded config, as of when it was loaded (a one-shot whose time has passed
    /// since, or an `end_at` in the past, is no error). Messages name the recorded file.
    ///
    /// # Errors
    /// [`ConfigError`] when the record does not read as a config (written by another
    /// version, or damaged).
    pub fn load(&self) -> Result<Config, ConfigError> {
        if self.text.is_empty() && self.jobs > 0 {
            return Err(ConfigError::Invalid {
                path: self.label(),
                problems: vec![crate::config::Problem::new(
                    "",
                    "",
                    format!(
                        "its {} jobs were not recorded: the file is larger than {} MiB; pass --config FILE",
                        self.jobs,
                        MAX_TEXT >> 20
                    ),
                )],
            });
        }
        Config::from_toml_at(&self.text, &self.label(), self.at)
    }

    /// How many records a store keeps once this one is the newest: [`KEEP`], or
    /// [`KEEP_LARGE`] for a large config.
    pub fn keep(&self) -> usize {
        if self.text.len() > LARGE {
            KEEP_LARGE
        } else {
            KEEP
        }
    }

    /// How messages name the record: `FILE (recorded)`.
    pub fn label(&self) -> PathBuf {
        PathBuf::from(format!("{} (recorded)", self.path))
    }
}

/// The SHA-256 of `text`, first 128 bits in hex.
pub fn text_digest(text: &str) -> String {
    let sum = Sha256::digest(text.as_bytes());
    sum.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// `text` (the config `config` was loaded from) without handlers, alert sinks and `.ics`
/// paths (see the module docs), as TOML text. Text that does not parse (it loaded, so it
/// does) gives an empty document.
pub fn without_secrets(text: &str, config: &Config) -> String {
    let Ok(mut table) = text.parse::<Table>() else {
        return String::new();
    };
    for key in LEFT_OUT {
        table.remove(*key);
    }
    if let Some(Value::Table(handlers)) = table.get_mut("handlers") {
        for (_, value) in handlers.iter_mut() {
            let mut body = Table::new();
            body.insert("command".into(), not_recorded());
            *value = Value::Table(body);
        }
    }
    if let Some(Value::Array(jobs)) = table.get_mut("job") {
        for job in jobs {
            if let Value::Table(job) = job {
                let inline = job.contains_key("command") || job.contains_key("http");
                for field in HANDLER_FIELDS {
                    job.remove(*field);
                }
                if inline {
                    job.insert("command".into(), not_recorded());
                }
            }
        }
    }
    if let Some(Value::Table(calendars)) = table.get_mut("calendars") {
        for (name, value) in calendars.iter_mut() {
            let Some(calendar) = config.calendars.get(name.as_str()) else {
                continue;
            };
            let dates = calendar
                .dates
                .iter()
                .map(|d| Value::String(d.format("%Y-%m-%d").to_string()))
                .collect();
            let mut fields = Table::new();
            fields.insert("dates".into(), Value::Array(dates));
            *value = Value::Table(fields);
        }
    }
    toml::to_string(&table).unwrap_or_default()
}

/// `command = ["(not recorded)"]`'s value.
fn not_recorded() -> Value {
    Value::Array(vec![Value::String(NOT_RECORDED.into())])
}

/// The list a store keeps after recording `new` in `history` (newest first): a load of the
/// text the newest record has replaces it (keeping its `since`), another is put first;
/// at most `new.keep()` records stay ([`KEEP`], fewer for a large config).
pub fn next_records(history: &[ConfigRecord], mut new: ConfigRecord) -> Vec<ConfigRecord> {
    let mut out = Vec::with_capacity(history.len() + 1);
    let rest = match history.first() {
        Some(newest) if newest.digest == new.digest => {
            new.since = newest.since;
            &history[1..]
        }
        _ => history,
    };
    let keep = new.keep();
    out.push(new);
    out.extend(rest.iter().take(keep - 1).cloned());
    out
}

/// How the jobs of a file given to a command differ from the recorded ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Drift {
    /// Jobs of the given file the record lacks.
    pub added: Vec<JobName>,
    /// Jobs of the record the given file lacks.
    pub removed: Vec<JobName>,
    /// Jobs of both, defined differently (handlers aside).
    pub changed: Vec<JobName>,
}

impl Drift {
    /// How the given file (`given`, loaded from `given_text`) differs from `recorded`
    /// (the record's config), comparing each job's definition without its handler.
    pub fn between(recorded: &Config, given: &Config, given_text: &str) -> Self {
        let given =
            Config::from_toml_at(&without_secrets(given_text, given), &given.path, Utc::now())
                .unwrap_or_else(|_| given.clone());
        let digests = |config: &Config| -> BTreeMap<JobName, JobDigest> {
            config
                .jobs
                .iter()
                .map(|j| (j.name.clone(), job_digest(j)))
                .collect()
        };
        let (old, new) = (digests(recorded), digests(&given));
        let mut drift = Self::default();
        for (name, digest) in &new {
            match old.get(name) {
                None => drift.added.push(name.clone()),
                Some(d) if d != digest => drift.changed.push(name.clone()),
                Some(_) => {}
            }
        }
        drift.removed = old
            .keys()
            .filter(|n| !new.contains_key(*n))
            .cloned()
            .collect();
        drift
    }

    /// Whether the two define the same jobs alike.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }

    /// `added: a, b; removed: c; changed: d`, the parts that are not empty.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for (what, names) in [
            ("added", &self.added),
            ("removed", &self.removed),
            ("changed", &self.changed),
        ] {
            if !names.is_empty() {
                let names: Vec<&str> = names.iter().map(JobName::as_str).collect();
                parts.push(format!("{what}: {}", names.join(", ")));
            }
        }
        parts.join("; ")
    }
}

/// Loads `path` and keeps its text, for a process that records what it loads.
///
/// # Errors
/// As [`Config::load`].
pub fn load_file(path: &Path) -> Result<Load, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    let config = Config::from_toml(&text, path)?;
    Ok(Load::new(Arc::new(config), text.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
[handlers.mail]
command = ["/bin/mail", "secret-arg"]

[[alert]]
kind = "webhook"
url = "https://hooks.example/secret-token"

[calendars.holidays]
dates = ["2026-12-25"]

[[job]]
name = "report"
schedule = "0 9 * * *"
command = ["/usr/bin/report", "--token", "s3cret"]
env = { TOKEN = "s3cret" }
calendars = ["holidays"]

[[job]]
name = "ping"
schedule = "@every 1m"
http = { url = "https://example.test/ping", headers = { Authorization = "Bearer s3cret" } }

[[job]]
name = "mailer"
schedule = "0 * * * *"
handler = "mail"
"#;

    fn load(text: &str) -> Load {
        Load::new(
            Arc::new(Config::from_toml(text, Path::new("c.toml")).expect("valid config")),
            text.into(),
        )
    }

    #[test]
    fn a_record_keeps_the_jobs_and_no_secret() {
        let record = ConfigRecord::new(&load(FILE), "me", Utc::now());
        assert!(!record.text.contains("s3cret"), "{}", record.text);
        assert!(!record.text.contains("secret-token"), "{}", record.text);
        assert!(!record.text.contains("secret-arg"), "{}", record.text);
        let config = record.load().expect("the record reads back");
        let names: Vec<&str> = config.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["report", "ping", "mailer"]);
        assert!(
            config.jobs.iter().all(|j| matches!(
                &j.handler,
                Some(crate::config::Handler::Command(c)) if c.argv == [NOT_RECORDED]
            )),
            "every job keeps a handler, not recorded: {:?}",
            config.jobs
        );
        assert_eq!(config.jobs[2].handler_name.as_deref(), Some("mail"));
        assert_eq!(
            config.handlers.keys().map(|k| &**k).collect::<Vec<_>>(),
            ["mail"],
            "the handlers' names are kept"
        );
        assert_eq!(record.jobs, 3);
        assert!(Drift::between(&config, &load(FILE).config, FILE).is_empty());
    }

    #[test]
    fn a_config_over_the_limit_is_recorded_without_its_text() {
        let text = format!("# {}\n{FILE}", "x".repeat(MAX_TEXT));
        let large = load(&text);
        let lean = large.clone().lean();
        assert!(lean.text.is_empty() && lean.digest == large.digest);
        let record = ConfigRecord::new(&lean, "me", Utc::now());
        assert_eq!(record.digest, text_digest(&text));
        assert!(record.text.is_empty());
        assert!(ConfigRecord::new(&large, "me", Utc::now()).text.is_empty());
        assert_eq!(record.jobs, 3);
        let err = record.load().expect_err("nothing to read");
        assert!(
            err.to_string().contains("c.toml (recorded)")
                && format!("{err:?}").contains("its 3 jobs were not recorded"),
            "{err:?}"
        );
    }

    #[test]
    fn drift_names_the_jobs_added_removed_and_changed() {
        let record = ConfigRecord::new(&load(FILE), "me", Utc::now());
        let recorded = record.load().expect("the record reads back");
        let other = FILE
            .replace("0 9 * * *", "0 10 * * *")
            .replace("name = \"ping\"", "name = \"pong\"")
            // A handler's change is no drift: the record has none.
            .replace("/bin/mail", "/bin/other-mail");
        let drift = Drift::between(&recorded, &load(&other).config, &other);
        assert_eq!(
            drift.describe(),
            "added: pong; removed: ping; changed: report"
        );
    }

    #[test]
    fn records_keep_the_first_load_of_a_text_and_at_most_keep() {
        let at = |s: i64| DateTime::from_timestamp(s, 0).expect("valid instant");
        let rec = |digest: &str, s: i64| ConfigRecord {
            path: "c.toml".into(),
            digest: digest.into(),
            since: at(s),
            at: at(s),
            by: "me".into(),
            jobs: 1,
            text: String::new(),
        };
        let list = next_records(&[], rec("a", 1));
        let list = next_records(&list, rec("a", 2));
        assert_eq!(list.len(), 1);
        assert_eq!((list[0].since, list[0].at), (at(1), at(2)));
        let list = next_records(&list, rec("b", 3));
        assert_eq!(
            list.iter().map(|r| &*r.digest).collect::<Vec<_>>(),
            ["b", "a"]
        );
        let mut list = list;
        for i in 0..30 {
            list = next_records(&list, rec(&format!("d{i}"), 10 + i));
        }
        assert_eq!(list.len(), KEEP);
        assert_eq!(list[0].digest, "d29");
        let mut large = rec("large", 100);
        large.text = "#".repeat(LARGE + 1);
        let list = next_records(&list, large);
        assert_eq!(list.len(), KEEP_LARGE, "a large config keeps fewer");
    }
}
