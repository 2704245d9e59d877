//! Named sections `[KIND.NAME]` (pools, calendars): the table of tables they are read
//! from, each name checked as a handler's is, and each section's own fields left to the
//! caller.
//!
//! Invariant: a section is kept only when reading it added no problem; every problem names
//! the section as `[KIND.NAME]`.

use std::collections::BTreeMap;
use std::sync::Arc;

use toml::{Table, Value};

use super::raw::{describe, key_text};
use super::report::Report;

/// Reads every `[KIND.NAME]` of `table` (the value of the top-level `KIND` key) with
/// `read(name, scope, fields, out)`, keeping what it returns for each section read without
/// a problem.
pub(super) fn read<T>(
    kind: &str,
    table: Option<Value>,
    out: &mut Report,
    mut read: impl FnMut(&str, &str, &Table, &mut Report) -> Option<T>,
) -> BTreeMap<Arc<str>, T> {
    let mut sections = BTreeMap::new();
    let Some(value) = table else {
        return sections;
    };
    let Value::Table(table) = value else {
        out.problem(
            "",
            kind,
            format!(
                "expected a table, written [{kind}.NAME], got {}",
                describe(&value)
            ),
        );
        return sections;
    };
    for (name, value) in table {
        let scope = format!("[{kind}.{}]", key_text(&name));
        let before = out.problems.len();
        if let Err(message) = super::validate::check_handler_name(&name) {
            // "pools" names a pool, "calendars" a calendar.
            let one = kind.strip_suffix('s').unwrap_or(kind);
            out.problem(
                &scope,
                "",
                message.replace("is not a handler name", &format!("is not a {one} name")),
            );
        }
        let Value::Table(fields) = value else {
            out.problem(
                &scope,
                "",
                format!(
                    "expected a table, written {scope}, got {}",
                    describe(&value)
                ),
            );
            continue;
        };
        if let Some(section) = read(&name, &scope, &fields, out)
            && out.problems.len() == before
        {
            sections.insert(Arc::from(name.as_str()), section);
        }
    }
    sections
}
