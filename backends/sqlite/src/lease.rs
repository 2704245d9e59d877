//! The leader lease in the data file: one row, whose epoch only grows; a second standalone
//! on the file waits for it as a standby. The terms recorded are rows of `leader_terms`,
//! whose `alive` a renewal moves in its own transaction.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, params};

use cronq_shared::lease::{Holder, Lease, LeaseError, Term, TermRecord};

use crate::db::{Db, Failure, STORE, ms, now_ms};

/// The leader lease of a data file.
#[derive(Debug, Clone)]
pub struct SqliteLease {
    db: Db,
}

impl SqliteLease {
    /// The lease in `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }
}

/// The stored lease: its epoch counter, and the term holding it with its expiry, if any.
struct Row {
    epoch: u64,
    held: Option<(Term, i64)>,
}

fn row(conn: &Connection) -> Result<Row, Failure> {
    let (epoch, token, instance, until): (i64, Option<String>, Option<String>, Option<i64>) = conn
        .prepare_cached("SELECT epoch, token, instance, until FROM leader WHERE id = 1")?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .optional()?
        .unwrap_or((0, None, None, None));
    let epoch = u64::try_from(epoch).unwrap_or(0);
    let held = match (token, instance, until) {
        (Some(token), Some(instance), Some(until)) if until > now_ms() => Some((
            Term {
                epoch,
                token,
                instance,
            },
            until,
        )),
        _ => None,
    };
    Ok(Row { epoch, held })
}

/// Whether `term` holds the lease now (the control store's fence, in its transaction).
pub(crate) fn is_current(conn: &Connection, term: &Term) -> Result<bool, Failure> {
    Ok(row(conn)?.held.is_some_and(|(held, _)| held == *term))
}

fn set(conn: &Connection, term: Option<&Term>, until: i64) -> Result<(), Failure> {
    conn.prepare_cached(
        "UPDATE leader SET epoch = max(epoch, ?1), token = ?2, instance = ?3, until = ?4 WHERE id = 1",
    )?
    .execute(params![
        term.map_or(0, |t| i64::try_from(t.epoch).unwrap_or(i64::MAX)),
        term.map(|t| t.token.as_str()),
        term.map(|t| t.instance.as_str()),
        term.map(|_| until),
    ])?;
    Ok(())
}

/// Moves the record of `term`, if begun, to alive now.
fn alive(conn: &Connection, term: &Term) -> Result<(), Failure> {
    conn.prepare_cached("UPDATE leader_terms SET alive = max(alive, ?1) WHERE epoch = ?2")?
        .execute(params![
            now_ms(),
            i64::try_from(term.epoch).unwrap_or(i64::MAX)
        ])?;
    Ok(())
}

fn instant(ms: i64) -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp_millis(ms).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

fn lease_error(op: &'static str) -> impl FnOnce(Failure) -> LeaseError {
    move |e| LeaseError::Store {
        store: STORE,
        op,
        source: Box::new(e),
    }
}

#[async_trait]
impl Lease for SqliteLease {
    async fn acquire(&self, instance: &str, ttl: Duration) -> Result<Option<Term>, LeaseError> {
        let instance = instance.to_owned();
        self.db
            .run(move |tx| {
                let row = row(tx)?;
                if row.held.is_some() {
                    return Ok(None);
                }
                let term = Term::new(row.epoch + 1, &instance);
                set(tx, Some(&term), now_ms() + ms(ttl))?;
                Ok(Some(term))
            })
            .await
            .map_err(lease_error("acquire"))
    }

    async fn renew(&self, term: &Term, ttl: Duration) -> Result<bool, LeaseError> {
        let term = term.clone();
        self.db
            .run(move |tx| {
                if !is_current(tx, &term)? {
                    return Ok(false);
                }
                set(tx, Some(&term), now_ms() + ms(ttl))?;
                alive(tx, &term)?;
                Ok(true)
            })
            .await
            .map_err(lease_error("renew"))
    }

    async fn release(&self, term: &Term) -> Result<bool, LeaseError> {
        let term = term.clone();
        self.db
            .run(move |tx| {
                if !is_current(tx, &term)? {
                    return Ok(false);
                }
                set(tx, None, 0)?;
                Ok(true)
            })
            .await
            .map_err(lease_error("release"))
    }

    async fn holder(&self) -> Result<Option<Holder>, LeaseError> {
        self.db
            .run(|conn| {
                Ok(row(conn)?.held.map(|(term, until)| Holder {
                    epoch: term.epoch,
                    instance: term.instance,
                    remaining: Duration::from_millis(
                        u64::try_from(until.saturating_sub(now_ms())).unwrap_or(0),
                    ),
                }))
            })
            .await
            .map_err(lease_error("holder"))
    }

    async fn begin(
        &self,
        term: &Term,
        start: DateTime<Utc>,
        keep: Duration,
    ) -> Result<(), LeaseError> {
        let (epoch, instance) = (
            i64::try_from(term.epoch).unwrap_or(i64::MAX),
            term.instance.clone(),
        );
        let start = start.timestamp_millis();
        let cutoff = start.saturating_sub(ms(keep));
        self.db
            .run(move |tx| {
                tx.prepare_cached("DELETE FROM leader_terms WHERE alive < ?1")?
                    .execute(params![cutoff])?;
                tx.prepare_cached(
                    "INSERT OR REPLACE INTO leader_terms (epoch, instance, start, alive) VALUES (?1, ?2, ?3, ?3)",
                )?
                .execute(params![epoch, instance, start])?;
                Ok(())
            })
            .await
            .map_err(lease_error("begin"))
    }

    async fn terms(&self) -> Result<Vec<TermRecord>, LeaseError> {
        self.db
            .run(|conn| {
                let mut stmt = conn.prepare_cached(
                    "SELECT epoch, instance, start, alive FROM leader_terms ORDER BY epoch",
                )?;
                let rows = stmt.query_map([], |r| {
                    Ok(TermRecord {
                        epoch: u64::try_from(r.get::<_, i64>(0)?).unwrap_or(0),
                        instance: r.get(1)?,
                        start: instant(r.get(2)?),
                        alive: instant(r.get(3)?),
                    })
                })?;
                Ok(rows.collect::<Result<Vec<_>, _>>()?)
            })
            .await
            .map_err(lease_error("terms"))
    }
}
