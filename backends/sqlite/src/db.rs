//! The data file: one SQLite connection per process (WAL, a busy timeout for the other
//! processes on the file), the schema brought up to date when it is opened, and the one way
//! the ports run SQL on it (`Db::run`): on the connection's own thread
//! (`crate::writer`), each operation atomic, batched with the others waiting into one
//! `BEGIN IMMEDIATE` transaction.
//!
//! Owns: opening, the pragmas, the schema version, mapping SQLite failures to what a
//! caller can do about them (`Failure`, in `failure.rs`). Leaves retrying to the callers (the table in
//! `cronq_shared::retry`): the queue retries its own calls, the stores' callers retry theirs.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::config::DbConfig;
use rusqlite::{Connection, ErrorCode, OpenFlags};

use cronq_shared::store::StoreError;

pub(crate) use crate::failure::{Failure, STORE};
use crate::schema;
use crate::writer::Writer;

/// How long a statement waits for another process's write to finish before it fails with
/// "database is locked": writes are short, so this only runs out when a process hangs
/// holding the file.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How many prepared statements a connection keeps: more than the ports use.
const STATEMENT_CACHE: usize = 128;

/// How a commit reaches the disk: SQLite's `synchronous` (`docs/standalone.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sync {
    /// `NORMAL`: a commit is in the write-ahead log, which is synced at each checkpoint. A
    /// killed process loses nothing; an OS crash or a power cut may lose the last commits
    /// (the file stays consistent).
    #[default]
    Normal,
    /// `FULL`: the log is synced at every commit: nothing committed is lost even on a power
    /// cut, at the price of one disk sync per write.
    Full,
}

impl Sync {
    fn pragma(self) -> &'static str {
        match self {
            Self::Normal => "NORMAL",
            Self::Full => "FULL",
        }
    }
}

/// One process's connection to a data file. Cheap to clone: clones share the connection.
#[derive(Clone)]
pub struct Db {
    inner: Arc<Inner>,
}

struct Inner {
    writer: Writer,
    path: PathBuf,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

impl Db {
    /// Opens (creating it if need be) the data file at `path` and brings its schema up to
    /// date.
    ///
    /// # Errors
    /// [`StoreError::File`] naming the file and what to do: it is not a cronq data file
    /// (or corrupt), it was written by a newer cronq, it cannot be written (read-only
    /// path), the disk is full.
    pub fn open(path: &Path, sync: Sync) -> Result<Self, StoreError> {
        let conn = Self::connect(path, sync).map_err(|e| file_error(path, e))?;
        let writer =
            Writer::start(conn, "cronq-sqlite".to_owned()).map_err(|e| StoreError::Command {
                store: STORE,
                source: Box::new(e),
            })?;
        Ok(Self {
            inner: Arc::new(Inner {
                writer,
                path: path.to_owned(),
            }),
        })
    }

    fn connect(path: &Path, sync: Sync) -> Result<Connection, Opening> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        check_space(path)?;
        let mut conn = Connection::open_with_flags(path, flags)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        // Room for every statement the ports prepare (the default keeps 16).
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        // One plan per statement, whatever its parameters: otherwise SQLite re-prepares the
        // statements whose partial-index choice looked at a parameter each time the
        // statement cache clears their bindings (docs/benchmarks-notebook.md, "Where the
        // standalone's time goes on SQLite").
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
        // The first statement that reads the file: a file that is not a database fails here.
        let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Opening::NoWal(mode));
        }
        conn.pragma_update(None, "synchronous", sync.pragma())?;
        schema::migrate(&mut conn)?;
        Ok(conn)
    }

    /// The file, as given.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// SQLite's `PRAGMA integrity_check`: `ok` when the file is sound, else its findings.
    ///
    /// # Errors
    /// [`StoreError`] when the check cannot run.
    pub async fn integrity_check(&self) -> Result<String, StoreError> {
        self.run(|conn| {
            let mut stmt = conn.prepare("PRAGMA integrity_check")?;
            let lines = stmt
                .query_map([], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(lines.join("\n"))
        })
        .await
        .map_err(Failure::into_store)
    }

    /// Runs `f` atomically: its changes commit when it returns `Ok` (even an `Ok` holding a
    /// refusal), and are rolled back when it fails; it returns once they are committed.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, Failure> + Send + 'static,
    ) -> Result<T, Failure> {
        let out = self
            .inner
            .writer
            .submit(f)
            .await
            .unwrap_or_else(|_| Err(stopped()));
        if let Err(e) = &out {
            // Said here, with the file: the ports' errors name only the store.
            tracing::warn!(data = %self.inner.path.display(), error = %e, "SQLite data file operation failed");
        }
        out
    }

    /// [`Db::run`] from outside an async runtime (a drop), blocking this thread.
    pub(crate) fn run_blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, Failure> + Send + 'static,
    ) -> Result<T, Failure> {
        self.inner
            .writer
            .submit(f)
            .blocking_recv()
            .unwrap_or_else(|_| Err(stopped()))
    }
}

fn stopped() -> Failure {
    Failure::Task("the data file's writer thread stopped".into())
}

/// Wall-clock milliseconds since the Unix epoch: every process on the file shares this
/// clock (leases and delays are instants in the file, not in one process's memory).
pub(crate) fn now_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// A duration in whole milliseconds, as stored (the ledger rules' conversion).
pub(crate) use cronq_ledger_rules::ms;

/// Why a data file could not be opened.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Opening {
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    #[error("its journal mode stays {0:?} instead of WAL")]
    NoWal(String),
    #[error(transparent)]
    Schema(#[from] schema::SchemaError),
    #[error("its file system has {} KiB free, less than the {} MiB cronq needs", free >> 10, MIN_FREE >> 20)]
    Full { free: u64 },
    #[error("its directory {0} does not exist")]
    NoDir(String),
}

/// Free space a data file's file system must have at start: room for the write-ahead log
/// to grow to its checkpoint size (1,000 pages) and then some, so that a nearly full disk
/// stops cronq at start rather than in the middle of the night.
pub(crate) const MIN_FREE: u64 = 8 << 20;

/// Refuses a file system with less than [`MIN_FREE`] bytes free.
fn check_space(path: &Path) -> Result<(), Opening> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(Opening::NoDir(dir.display().to_string()));
    }
    // A path whose directory cannot be inspected fails when it is opened, with its reason.
    let Ok(stat) = nix::sys::statvfs::statvfs(dir) else {
        return Ok(());
    };
    let free = stat.blocks_available().saturating_mul(stat.fragment_size());
    if free < MIN_FREE {
        return Err(Opening::Full { free });
    }
    Ok(())
}

/// The user's error for a file that cannot be opened: what is wrong and what to do.
fn file_error(path: &Path, e: Opening) -> StoreError {
    let full = "free space on its file system, or give another path with --data";
    let sqlite = match &e {
        Opening::Sqlite(s) | Opening::Schema(schema::SchemaError::Sqlite(s)) => Some(s),
        _ => None,
    };
    let (problem, hint): (String, &'static str) =
        match (&e, sqlite.and_then(rusqlite::Error::sqlite_error_code)) {
            (Opening::Schema(s), None) => (s.to_string(), s.hint()),
            (Opening::NoWal(_), _) => (
                e.to_string(),
                "put the data file on a local file system that supports SQLite's WAL mode",
            ),
            (Opening::Full { .. }, _) => (e.to_string(), full),
            (Opening::NoDir(_), _) => (
                e.to_string(),
                "create it first (mkdir -p), or give another path with --data",
            ),
            (_, Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt)) => (
                "is not a cronq data file (not a SQLite database, or corrupt)".to_owned(),
                "move it away to start afresh, or restore it from a backup",
            ),
            (
                _,
                Some(ErrorCode::ReadOnly | ErrorCode::CannotOpen | ErrorCode::PermissionDenied),
            ) => (
                "cannot be created or written (a read-only path, or no permission)".to_owned(),
                "give a writable path with --data or CRONQ_DATA",
            ),
            (_, Some(ErrorCode::DiskFull)) => ("the disk is full".to_owned(), full),
            (_, Some(ErrorCode::SystemIoFailure)) => (
                "a disk I/O error (is its file system full or failing?)".to_owned(),
                full,
            ),
            (_, Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)) => (
                format!("is locked by another process for more than {BUSY_TIMEOUT:?}"),
                "check which process holds it (fuser FILE) and stop it",
            ),
            _ => (
                format!(
                    "cannot be opened ({})",
                    sqlite.map_or_else(|| e.to_string(), ToString::to_string)
                ),
                "check the path and the file system",
            ),
        };
    // The problem says what SQLite said: no source to print it a second time.
    StoreError::File {
        path: path.display().to_string(),
        problem,
        hint,
        source: None,
    }
}
