//! The ledger's storage in the data file, for the rules of `cronq_ledger_rules`:
//! records, the slots of gates and the history, read and written inside one transaction.
//! A gate's wait list is an index over the records in state `waiting` on it; the reaper's
//! schedule an index over their `due` instants.

use rusqlite::{Connection, OptionalExtension, Row, params};

use cronq_ledger_rules::{JobLock, Rec, Records};
use cronq_shared::ledger::State;
use cronq_shared::runlog::Run;

use crate::db::Failure;
use crate::runlog;

/// The rules' storage on one transaction, at one instant.
pub(super) struct Store<'c> {
    pub(super) conn: &'c Connection,
    pub(super) now: i64,
}

/// The columns of a record, after its key (a macro, so that the statements below are
/// literals: no formatting on the hot path).
macro_rules! columns {
    () => {
        "job, state, attempt, next, token, queue, body, lease_until, cancel, exclusive, sched, \
         error, expires, due, fence, cap, pool, pool_cap, gate"
    };
}

const GET: &str = concat!("SELECT ", columns!(), " FROM records WHERE key = ?1");
const PUT: &str = concat!(
    "INSERT OR REPLACE INTO records (key, ",
    columns!(),
    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)"
);
const FIRST_WAITERS: &str = "SELECT sched, key FROM records
     WHERE gate = ?1 AND state = 'waiting' AND body IS NOT NULL AND expires > ?2
     ORDER BY sched ASC, key ASC LIMIT ?3";
const LAST_WAITERS: &str = "SELECT sched, key FROM records
     WHERE gate = ?1 AND state = 'waiting' AND body IS NOT NULL AND expires > ?2
     ORDER BY sched DESC, key DESC LIMIT ?3";

fn from_row(key: &str, r: &Row<'_>) -> rusqlite::Result<Result<Rec, Failure>> {
    let state: String = r.get(1)?;
    let Some(state) = State::parse(&state) else {
        return Ok(Err(Failure::Corrupt {
            key: key.to_owned(),
            source: serde::de::Error::custom(format!("unknown state {state:?}")),
        }));
    };
    Ok(Ok(Rec {
        job: r.get(0)?,
        state,
        attempt: r.get(2)?,
        next: r.get(3)?,
        token: r.get(4)?,
        queue: r.get(5)?,
        body: r.get(6)?,
        lease_until: r.get(7)?,
        cancel: r.get(8)?,
        exclusive: r.get(9)?,
        sched: r.get(10)?,
        error: r.get(11)?,
        expires: r.get(12)?,
        due: r.get(13)?,
        fence: u64::try_from(r.get::<_, i64>(14)?).unwrap_or(0),
        cap: r.get(15)?,
        pool: r.get(16)?,
        pool_cap: r.get(17)?,
        gate: r.get(18)?,
    }))
}

fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Store<'_> {
    /// Drops up to `batch` records past their retention and the locks past their time.
    pub(super) fn expire(&self, batch: usize) -> Result<(), Failure> {
        self.conn
            .prepare_cached(
                "DELETE FROM records WHERE key IN
                   (SELECT key FROM records WHERE expires <= ?1 LIMIT ?2)",
            )?
            .execute(params![self.now, limit(batch)])?;
        self.conn
            .prepare_cached("DELETE FROM slots WHERE until <= ?1")?
            .execute([self.now])?;
        Ok(())
    }

    /// How many cancels of running attempts were asked for (`Ledger::cancels`).
    pub(super) fn cancels(&self) -> Result<u64, Failure> {
        Ok(self
            .conn
            .prepare_cached("SELECT n FROM cancel_count WHERE one = 1")?
            .query_row([], |r| r.get::<_, i64>(0))
            .optional()?
            .map_or(0, |n| u64::try_from(n).unwrap_or(0)))
    }
}

impl Records for Store<'_> {
    type Error = Failure;

    fn now(&self) -> i64 {
        self.now
    }

    fn get(&mut self, key: &str) -> Result<Option<Rec>, Failure> {
        self.conn
            .prepare_cached(GET)?
            .query_row([key], |r| from_row(key, r))
            .optional()?
            .transpose()
    }

    fn put(&mut self, key: &str, rec: &Rec) -> Result<(), Failure> {
        self.conn.prepare_cached(PUT)?.execute(params![
            key,
            rec.job,
            rec.state.as_str(),
            rec.attempt,
            rec.next,
            rec.token,
            rec.queue,
            rec.body,
            rec.lease_until,
            rec.cancel,
            rec.exclusive,
            rec.sched,
            rec.error,
            rec.expires,
            rec.due,
            i64::try_from(rec.fence).unwrap_or(i64::MAX),
            rec.cap,
            rec.pool,
            rec.pool_cap,
            rec.gate,
        ])?;
        Ok(())
    }

    fn remove(&mut self, key: &str) -> Result<(), Failure> {
        self.conn
            .prepare_cached("DELETE FROM records WHERE key = ?1")?
            .execute([key])?;
        Ok(())
    }

    fn slots(&mut self, gate: &str) -> Result<Vec<JobLock>, Failure> {
        Ok(self
            .conn
            .prepare_cached("SELECT holder, token, until FROM slots WHERE gate = ?1")?
            .query_map([gate], |r| {
                Ok(JobLock {
                    holder: r.get(0)?,
                    token: r.get(1)?,
                    until: r.get(2)?,
                })
            })?
            .collect::<Result<_, _>>()?)
    }

    fn set_slot(
        &mut self,
        gate: &str,
        holder: &str,
        slot: Option<&JobLock>,
    ) -> Result<(), Failure> {
        match slot {
            Some(l) => self
                .conn
                .prepare_cached(
                    "INSERT OR REPLACE INTO slots (gate, holder, token, until)
                     VALUES (?1, ?2, ?3, ?4)",
                )?
                .execute(params![gate, holder, l.token, l.until])?,
            None => self
                .conn
                .prepare_cached("DELETE FROM slots WHERE gate = ?1 AND holder = ?2")?
                .execute([gate, holder])?,
        };
        Ok(())
    }

    fn wait_ends(
        &mut self,
        gate: &str,
        n: usize,
        last: bool,
    ) -> Result<Vec<(i64, String)>, Failure> {
        Ok(self
            .conn
            .prepare_cached(if last { LAST_WAITERS } else { FIRST_WAITERS })?
            .query_map(params![gate, self.now, limit(n)], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?
            .collect::<Result<_, _>>()?)
    }

    fn waiting(&mut self, gate: &str) -> Result<Vec<String>, Failure> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT key FROM records WHERE gate = ?1 AND state = 'waiting' ORDER BY sched, key",
            )?
            .query_map([gate], |r| r.get(0))?
            .collect::<Result<_, _>>()?)
    }

    fn due(&mut self, n: usize) -> Result<Vec<String>, Failure> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT key FROM records WHERE due IS NOT NULL AND due <= ?1 ORDER BY due LIMIT ?2",
            )?
            .query_map(params![self.now, limit(n)], |r| r.get(0))?
            .collect::<Result<_, _>>()?)
    }

    fn append(&mut self, run: &Run) -> Result<(), Failure> {
        runlog::append(self.conn, run)
    }

    fn next_fence(&mut self, job: &str) -> Result<u64, Failure> {
        let fence: i64 = self
            .conn
            .prepare_cached(
                "INSERT INTO fences (job, fence) VALUES (?1, 1)
                 ON CONFLICT (job) DO UPDATE SET fence = fence + 1 RETURNING fence",
            )?
            .query_row([job], |r| r.get(0))?;
        Ok(u64::try_from(fence).unwrap_or(0))
    }

    fn count_cancel(&mut self) -> Result<(), Failure> {
        self.conn
            .prepare_cached(
                "INSERT INTO cancel_count (one, n) VALUES (1, 1)
                 ON CONFLICT (one) DO UPDATE SET n = n + 1",
            )?
            .execute([])?;
        Ok(())
    }
}
