//! Loading a config: the one entry ([`Config::load`], [`Config::from_toml`],
//! [`Config::from_toml_at`]), which reads the text by one of two paths, then resolves and
//! checks what it read (`validate`, stage two).
//!
//! How a config is read (stage one), and why:
//!
//! - **The fast path** (`quick`), taken for a file laid out the usual way: its sections,
//!   then `[[job]]` tables, each followed only by its own `[job.…]` sub-tables (what
//!   `pieces` can cut at its `[[job]]` header lines). Its head is read the careful way;
//!   each job's piece of text is read on its own as the validator reaches it, in batches
//!   spread over the machine's cores, straight from the text into the job's raw form when
//!   the piece is well formed, and by the careful reader of one job table (`raw::job`) when
//!   it is not. Why: parsing a million jobs as one TOML document takes ≈ 3 GB at once, and
//!   the per-job read is most of a load's time, so a large config loads on threads, a
//!   piece at a time.
//! - **The careful path** (`raw`), taken for any other file, and for a file the fast
//!   path met a piece in that does not parse alone to exactly one job (a duplicate key, a
//!   syntax error, a second table): the whole text parsed as one TOML document, then every
//!   section and every job read field by field. Why: a syntax error's line and column are
//!   the whole text's, and a layout that cannot be cut is read right only whole.
//!
//! Both give the same config, the same problems and the same warnings, in the same order:
//! every problem names the file, the section or job (`job "name"`, or `job #N` by its
//! position when its name is not valid) and the field, and a syntax error its line and
//! column. Tests pin it: `quick`'s (the fast read of one piece against the careful read),
//! `pieces`' (whole files, a 10,000-job one read on threads among them), and
//! `proptests`' (generated files) compare [`fast`] with [`careful`].
//!
//! Invariant: loading never reads or changes the process environment; `now` is the only
//! outside input besides the text.

use std::path::Path;

use chrono::{DateTime, Utc};

use super::raw::RawConfig;
use super::{Config, ConfigError};
use super::{quick, validate};

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
        fast(text, path, now).unwrap_or_else(|| careful(text, path, now))
    }
}

/// The fast path, resolved; `None` when it is not taken: the file is not laid out the
/// usual way, or a piece did not parse alone (then only the whole text says why, and
/// where).
pub(super) fn fast(
    text: &str,
    path: &Path,
    now: DateTime<Utc>,
) -> Option<Result<Config, ConfigError>> {
    std::thread::scope(|scope| {
        let (raw, broken) = quick::parse(text, scope)?;
        let resolved = validate::resolve(raw, path, now);
        (!broken.get()).then_some(resolved)
    })
}

/// The careful path, resolved: the whole text as one document.
pub(super) fn careful(text: &str, path: &Path, now: DateTime<Utc>) -> Result<Config, ConfigError> {
    validate::resolve(RawConfig::parse_whole(text), path, now)
}
