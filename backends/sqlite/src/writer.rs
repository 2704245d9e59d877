//! Group commit: the one thread that owns a process's connection to the data file and runs
//! every port operation on it, as many as are waiting (up to [`MAX_BATCH`]) in one
//! `BEGIN IMMEDIATE` transaction, each inside a savepoint of its own.
//!
//! Why: each transaction costs file locks and a write-ahead-log append (and with
//! `--data-sync full` a disk sync), which dominate the small operations of a busy
//! standalone; a batch pays them once.
//!
//! Invariants: an operation's effects are either all in the file or none (a failing one is
//! rolled back to its savepoint, the others commit); no caller hears of success before the
//! batch's `COMMIT` returned; a failed `COMMIT` fails every operation of the batch.

use std::sync::mpsc;

use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::failure::Failure;

/// The most operations one transaction holds: enough to amortize a commit over a burst,
/// few enough that one batch stays short for the processes waiting on the file's lock.
const MAX_BATCH: usize = 128;

/// One queued operation, type-erased.
trait Work: Send {
    /// Runs it; `false` when it failed (its savepoint is rolled back).
    fn run(&mut self, conn: &Connection) -> bool;
    /// Reports its outcome once the batch ended: `commit` is the batch's `COMMIT` error.
    fn finish(self: Box<Self>, commit: Option<&rusqlite::Error>);
}

struct Task<T, F> {
    f: Option<F>,
    out: Option<Result<T, Failure>>,
    reply: oneshot::Sender<Result<T, Failure>>,
}

impl<T, F> Work for Task<T, F>
where
    T: Send,
    F: FnOnce(&Connection) -> Result<T, Failure> + Send,
{
    fn run(&mut self, conn: &Connection) -> bool {
        let Some(f) = self.f.take() else {
            return false;
        };
        let out = f(conn);
        let ok = out.is_ok();
        self.out = Some(out);
        ok
    }

    fn finish(self: Box<Self>, commit: Option<&rusqlite::Error>) {
        let out = match (commit, self.out) {
            (None, Some(out)) => out,
            (Some(e), _) => Err(copy(e)),
            (None, None) => Err(Failure::Task("the operation was not run".into())),
        };
        // A caller that went away does not need the answer.
        let _ = self.reply.send(out);
    }
}

/// The batch's error, for each of its jobs (a SQLite error is not `Clone`).
fn copy(e: &rusqlite::Error) -> Failure {
    match e.sqlite_error() {
        Some(code) => Failure::Sqlite(rusqlite::Error::SqliteFailure(*code, Some(e.to_string()))),
        None => Failure::Task(format!("the transaction failed: {e}")),
    }
}

/// The handle on the writer thread; dropping every clone ends the thread (and closes the
/// connection).
#[derive(Clone)]
pub(crate) struct Writer {
    queue: mpsc::Sender<Box<dyn Work>>,
}

impl Writer {
    /// Starts the thread that owns `conn`.
    pub(crate) fn start(conn: Connection, name: String) -> std::io::Result<Self> {
        let (queue, jobs) = mpsc::channel::<Box<dyn Work>>();
        std::thread::Builder::new()
            .name(name)
            .spawn(move || run(&conn, &jobs))?;
        Ok(Self { queue })
    }

    /// Queues `f`; the receiver gets its outcome once its batch has committed.
    pub(crate) fn submit<T, F>(&self, f: F) -> oneshot::Receiver<Result<T, Failure>>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, Failure> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let task = Box::new(Task {
            f: Some(f),
            out: None,
            reply,
        });
        // A stopped thread drops the task: the receiver then reports it (see `Db::run`).
        let _ = self.queue.send(task);
        answer
    }
}

/// The thread: takes what is queued, runs it as one transaction, reports, and again.
fn run(conn: &Connection, jobs: &mpsc::Receiver<Box<dyn Work>>) {
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let commit = transaction(conn, &mut batch).err();
        for job in batch {
            job.finish(commit.as_ref());
        }
    }
}

/// Runs `batch` in one transaction, each job in a savepoint; the `COMMIT` error, if any.
fn transaction(conn: &Connection, batch: &mut [Box<dyn Work>]) -> Result<(), rusqlite::Error> {
    let sql = |text: &str| conn.prepare_cached(text)?.execute([]).map(|_| ());
    sql("BEGIN IMMEDIATE")?;
    for job in batch.iter_mut() {
        let step = (|| {
            sql("SAVEPOINT op")?;
            if !job.run(conn) {
                sql("ROLLBACK TO op")?;
            }
            sql("RELEASE op")
        })();
        if let Err(e) = step {
            // The transaction itself is in doubt: give it up, every job with it.
            let _ = sql("ROLLBACK");
            return Err(e);
        }
    }
    if let Err(e) = sql("COMMIT") {
        let _ = sql("ROLLBACK");
        return Err(e);
    }
    Ok(())
}
