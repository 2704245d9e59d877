//! Config errors as a user sees them: every problem names the file, the scope and the field.

use std::fmt;
use std::path::{Path, PathBuf};

/// A config could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: cannot read file", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// One or more rules are broken.
    #[error("invalid config ({} problem{}):\n{}", .problems.len(), if .problems.len() == 1 { "" } else { "s" }, Problem::lines(.path, .problems))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Every problem found, in file order.
        problems: Vec<Problem>,
    },
}

/// One broken rule. `scope` is `job "nightly-report"`, `[leader]` or `[defaults]`; `field`
/// is the TOML key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where: `job "x"`, `[leader]`, `[defaults]`, or empty for the whole file.
    pub scope: String,
    /// The TOML key, or empty.
    pub field: String,
    /// What is wrong and what is allowed.
    pub message: String,
}

impl Problem {
    /// A problem in `scope` at `field`.
    pub fn new(
        scope: impl Into<String>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            scope: scope.into(),
            field: field.into(),
            message: message.into(),
        }
    }

    /// One line per problem, each prefixed with the file.
    pub fn lines(path: &Path, problems: &[Problem]) -> String {
        problems
            .iter()
            .map(|p| format!("{}: {p}", path.display()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.scope.is_empty() {
            write!(f, "{}: ", self.scope)?;
        }
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}
