//! The schema of a data file and its migrations: `schema/N.sql` takes a file from version
//! `N - 1` to `N`; the version is SQLite's `user_version`, and `application_id` marks the
//! file as cronq's.
//!
//! Invariant: a file is only ever moved forward, in one transaction per open; a file of a
//! newer version than this build knows, or another program's database, is refused, never
//! touched.

use rusqlite::{Connection, TransactionBehavior};

/// The migrations, in order: entry `i` takes a file from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    include_str!("schema/1.sql"),
    include_str!("schema/2.sql"),
    include_str!("schema/3.sql"),
    include_str!("schema/4.sql"),
    include_str!("schema/5.sql"),
    include_str!("schema/6.sql"),
    include_str!("schema/7.sql"),
    include_str!("schema/8.sql"),
    include_str!("schema/9.sql"),
];

/// The schema version this build writes.
pub const VERSION: i64 = MIGRATIONS.len() as i64;

/// `PRAGMA application_id` of a cronq data file: "crnq".
const APPLICATION_ID: i64 = 0x6372_6e71;

/// Why the schema cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// Written by a newer cronq.
    #[error("has schema version {found}, newer than this cronq knows ({VERSION})")]
    Newer {
        /// The file's version.
        found: i64,
    },
    /// Another program's SQLite database.
    #[error("is a SQLite database of another program (application id {id:#x}, {tables} tables)")]
    Foreign {
        /// Its `application_id`.
        id: i64,
        /// How many tables it has.
        tables: i64,
    },
    /// SQLite failed while migrating.
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
}

impl SchemaError {
    /// What to do about it.
    pub(crate) fn hint(&self) -> &'static str {
        match self {
            Self::Newer { .. } => {
                "run the cronq version that wrote it (or a newer one), or give another --data path"
            }
            Self::Foreign { .. } => "give the path of a cronq data file, or a new one, with --data",
            Self::Sqlite(_) => "check the file system the data file is on",
        }
    }
}

/// Brings the file to [`VERSION`], or refuses it.
pub(crate) fn migrate(conn: &mut Connection) -> Result<(), SchemaError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let id: i64 = tx.query_row("PRAGMA application_id", [], |r| r.get(0))?;
    if found > VERSION {
        return Err(SchemaError::Newer { found });
    }
    let tables: i64 = tx.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table'",
        [],
        |r| r.get(0),
    )?;
    let ours = id == APPLICATION_ID || (id == 0 && found == 0 && tables == 0);
    if !ours {
        return Err(SchemaError::Foreign { id, tables });
    }
    if found == VERSION {
        return Ok(());
    }
    for sql in &MIGRATIONS[usize::try_from(found).unwrap_or(0)..] {
        tx.execute_batch(sql)?;
    }
    tx.pragma_update(None, "application_id", APPLICATION_ID)?;
    tx.pragma_update(None, "user_version", VERSION)?;
    tx.commit()?;
    Ok(())
}
