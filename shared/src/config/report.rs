//! The problems and warnings found while resolving one config, in the order found.
//!
//! Every check (`validate`, `handler`, `payload`, `warnings`) writes into one [`Report`];
//! this module depends on nothing but [`Problem`], so the checks depend on it and never on
//! each other.

use super::error::Problem;

/// Problems and warnings, in the order found.
#[derive(Default)]
pub(super) struct Report {
    pub(super) problems: Vec<Problem>,
    pub(super) warnings: Vec<Problem>,
}

impl Report {
    pub(super) fn problem(&mut self, scope: &str, field: &str, message: impl Into<String>) {
        self.problems.push(Problem::new(scope, field, message));
    }

    pub(super) fn warn(&mut self, scope: &str, field: &str, message: impl Into<String>) {
        self.warnings.push(Problem::new(scope, field, message));
    }

    /// Parses `value` into `slot` when the field is set; a bad value is a problem naming
    /// `field`, and `slot` keeps its value.
    pub(super) fn set<V, T>(
        &mut self,
        scope: &str,
        field: &str,
        value: Option<V>,
        parse: impl FnOnce(V) -> Result<T, String>,
        slot: &mut T,
    ) {
        if let Some(value) = value {
            match parse(value) {
                Ok(parsed) => *slot = parsed,
                Err(message) => self.problem(scope, field, message),
            }
        }
    }
}
