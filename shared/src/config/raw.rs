//! Stage one of loading: what the file says, as plain serde structs. No rule is checked
//! here beyond TOML syntax and types.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::error::{ConfigError, Problem};

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    #[serde(default)]
    pub(crate) defaults: RawDefaults,
    #[serde(default)]
    pub(crate) leader: RawLeader,
    #[serde(default, rename = "job")]
    pub(crate) jobs: Vec<RawJob>,
}

/// `[defaults]`: every field optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDefaults {
    pub(crate) timezone: Option<String>,
    pub(crate) timeout: Option<String>,
    pub(crate) overlap: Option<String>,
    pub(crate) catchup: Option<String>,
    pub(crate) catchup_window: Option<String>,
    pub(crate) deadline: Option<String>,
    pub(crate) max_attempts: Option<i64>,
    pub(crate) backoff: Option<String>,
    pub(crate) backoff_max: Option<String>,
    pub(crate) jitter: Option<String>,
    pub(crate) queue: Option<String>,
    pub(crate) retention: Option<String>,
}

/// `[leader]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLeader {
    pub(crate) lease: Option<String>,
    pub(crate) renew_deadline: Option<String>,
    pub(crate) retry: Option<String>,
}

/// One `[[job]]`: the defaults' fields plus the job's own.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawJob {
    pub(crate) name: Option<String>,
    pub(crate) schedule: Option<String>,
    #[serde(flatten)]
    pub(crate) common: RawDefaults,
    pub(crate) payload: Option<toml::Table>,
    pub(crate) command: Option<Vec<String>>,
    pub(crate) http: Option<RawHttp>,
}

/// `http = { … }`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHttp {
    pub(crate) url: Option<String>,
    pub(crate) method: Option<String>,
    #[serde(default)]
    pub(crate) headers: BTreeMap<String, String>,
}

impl RawConfig {
    /// Parses TOML text into the raw structs.
    pub(crate) fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Invalid {
            path: path.to_owned(),
            problems: vec![Problem::new("", "", e.message().to_owned())],
        })
    }
}
