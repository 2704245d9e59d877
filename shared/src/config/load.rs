//! Loading a config: read the file, parse it into raw sections (`raw`, stage one), then
//! resolve and check them (`validate`, stage two).
//!
//! Invariant: loading never reads or changes the process environment; `now` is the only
//! outside input besides the text.

use std::path::Path;

use chrono::{DateTime, Utc};

use super::raw::RawConfig;
use super::validate;
use super::{Config, ConfigError};

impl Config {
    /// Reads, parses and validates the file at `path`.
    ///
    /// # Errors
    /// [`ConfigError`] lists every problem, each naming the file, the job or section, and
    /// the field.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_toml(&text, path)
    }

    /// Parses and validates config text; `path` is used in messages.
    ///
    /// # Errors
    /// As [`Config::load`].
    pub fn from_toml(text: &str, path: &Path) -> Result<Self, ConfigError> {
        Self::from_toml_at(text, path, Utc::now())
    }

    /// As [`Config::from_toml`], with "now" given: a schedule must fire at least once after
    /// `now`, and the look-ahead warnings (daylight-saving transitions in the next year)
    /// start from it.
    ///
    /// # Errors
    /// As [`Config::load`].
    pub fn from_toml_at(text: &str, path: &Path, now: DateTime<Utc>) -> Result<Self, ConfigError> {
        let raw = RawConfig::parse(text);
        let broken = raw.broken();
        let resolved = validate::resolve(raw, path, now);
        if broken.get() {
            // A job's piece did not parse alone: the whole text says why, and where.
            return validate::resolve(RawConfig::parse_whole(text), path, now);
        }
        resolved
    }
}
