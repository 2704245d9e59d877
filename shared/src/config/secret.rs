//! Values of the config that may be secrets (an `http` handler's URL and header values):
//! given inline, or read from the environment (`{ env = "NAME" }`) or a file
//! (`{ file = "/run/secrets/token" }`) each time the config is loaded (start, reload).
//!
//! Invariant: a [`Secret`] shows where it came from, never its value: its `Debug` and
//! `Display` name the variable or the file, so no log, error or listing can print it;
//! only [`Secret::expose`] hands the value out, to the request that needs it.

use std::fmt;
use std::path::PathBuf;

use super::raw::describe;
use super::report::Report;

/// Where a secret value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Written in the config file.
    Inline,
    /// The environment variable of this name, where cronq runs.
    Env(String),
    /// This file, read whole (one trailing line break dropped).
    File(PathBuf),
}

/// A value read from the config, the environment or a file; shown by its origin only.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    value: String,
    origin: Origin,
}

impl Secret {
    /// A value written in the config file.
    pub fn inline(value: impl Into<String>) -> Self {
        Self {
            value: value.into(),
            origin: Origin::Inline,
        }
    }

    /// The value, for the one place that uses it.
    pub fn expose(&self) -> &str {
        &self.value
    }

    /// Where it came from.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({self})")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.origin {
            Origin::Inline => f.write_str("inline"),
            Origin::Env(name) => write!(f, "from env {name}"),
            Origin::File(path) => write!(f, "from file {}", path.display()),
        }
    }
}

/// What a secret field takes, for the problems that name the field.
pub(super) const FORMS: &str = "a string, { env = \"VARIABLE\" } or { file = \"/absolute/path\" }";

/// Reads `value` of `field` (a string, `{ env = … }` or `{ file = … }`); a problem naming
/// the field (never the value) when it cannot be read.
pub(super) fn resolve(
    value: &toml::Value,
    scope: &str,
    field: &str,
    out: &mut Report,
) -> Option<Secret> {
    let table = match value {
        toml::Value::String(s) => return Some(Secret::inline(s.clone())),
        toml::Value::Table(t) => t,
        other => {
            out.problem(
                scope,
                field,
                format!("expected {FORMS}, got {}", describe(other)),
            );
            return None;
        }
    };
    let read = match (table.len(), table.iter().next()) {
        (1, Some((key, toml::Value::String(name)))) if key == "env" => from_env(name),
        (1, Some((key, toml::Value::String(path)))) if key == "file" => from_file(path),
        _ => Err(format!(
            "expected {FORMS}, got a table with {}",
            if table.is_empty() {
                "nothing in it".to_owned()
            } else {
                table
                    .keys()
                    .map(|k| format!("{k:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        )),
    };
    match read {
        Ok(secret) if secret.value.is_empty() => {
            out.problem(scope, field, format!("the value {secret} is empty"));
            None
        }
        Ok(secret) => Some(secret),
        Err(why) => {
            out.problem(scope, field, why);
            None
        }
    }
}

fn from_env(name: &str) -> Result<Secret, String> {
    match std::env::var(name) {
        Ok(value) => Ok(Secret {
            value,
            origin: Origin::Env(name.to_owned()),
        }),
        Err(std::env::VarError::NotPresent) => Err(format!(
            "the environment variable {name} is not set: set it where cronq runs (it is read at start and at each reload)"
        )),
        Err(std::env::VarError::NotUnicode(_)) => Err(format!(
            "the environment variable {name} is not valid UTF-8"
        )),
    }
}

fn from_file(path: &str) -> Result<Secret, String> {
    if !path.starts_with('/') {
        return Err(format!(
            "{path:?} is not an absolute path: give one such as \"/run/secrets/token\""
        ));
    }
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("cannot read the file {path}: {e}"))?;
    let value = text
        .strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(&text);
    Ok(Secret {
        value: value.to_owned(),
        origin: Origin::File(PathBuf::from(path)),
    })
}
