//! The fast path of stage one: a file laid out the usual way, read a piece at a time,
//! each well-formed piece straight from its text, on every core.
//!
//! [`parse`] cuts the text into its head and one piece per `[[job]]` (`super::pieces`),
//! reads the head the careful way (`super::raw`), and hands out the jobs as the caller
//! reaches them. Most jobs of a large file are well formed: every field known, each of its
//! type. Such a piece deserializes from the text in one pass into [`QuickJob`], without
//! building a TOML table tree first and reading it again field by field. The pieces are
//! read this way in batches by reader threads, ahead of the caller, which resolves each
//! batch while the next ones are read ([`Reading`]): each piece is independent of the
//! others, and this read and the caller's work are most of a load's time. A piece that is
//! not well formed (an unknown field, a wrong type) is read by the careful path's reader
//! of one job table (`raw::job`), which finds and words every problem; a piece that does
//! not parse alone to exactly one job stops the jobs and raises the flag [`parse`]
//! returns: then the caller reads the whole text the careful way.
//!
//! Invariant: whatever [`read`] returns is exactly what the careful way would have read
//! from the same piece, so the fast path gives what the careful path gives (tests here
//! compare both on a job that sets every field; `super::proptests` on generated files).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::{Arc, mpsc};

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use toml::Table;

use super::raw::{self, RawConfig, RawDefaults, RawHttp, RawJob, RawJobOwn, RawJobs, Section};
use crate::names::JobName;

/// Set once a piece did not parse alone to exactly one job: the jobs handed out stop
/// there, and the text must be read the careful way.
pub(super) type Broken = Rc<Cell<bool>>;

/// The fast path's reading of `text`, jobs read as the caller iterates them (on reader
/// threads of `scope`, ahead of the caller), and the flag raised when a piece sent it back
/// to the whole text (read it after the jobs); `None` when the file has no job, is laid out
/// otherwise, or its head does not parse.
pub(super) fn parse<'s, 't: 's>(
    text: &'t str,
    scope: &'s std::thread::Scope<'s, '_>,
) -> Option<(RawConfig<'t>, Broken)> {
    let pieces = super::pieces::cut(text)?;
    let broken = Broken::default();
    let jobs = Jobs {
        reading: Reading::start(pieces.jobs, scope),
        ahead: Vec::new().into_iter(),
        ordinal: 0,
        broken: broken.clone(),
    };
    Some((
        RawConfig::with_jobs(pieces.head, RawJobs::new(jobs)),
        broken,
    ))
}

/// The `[[job]]` pieces of a cut file, each read a batch ahead of the caller, so a large
/// file never holds every job in two forms at once.
struct Jobs<'t> {
    /// The pieces, and their reads to come.
    reading: Reading<'t>,
    /// The next pieces, each with its quick read when it was well formed.
    ahead: std::vec::IntoIter<(&'t str, Option<RawJob>)>,
    /// How many jobs were handed out.
    ordinal: usize,
    /// Raised when a piece did not parse to one job: the iteration stops there.
    broken: Broken,
}

impl Iterator for Jobs<'_> {
    type Item = Section<RawJob>;

    /// At most one job per piece left.
    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.ahead.len() + self.reading.left();
        (0, Some(left))
    }

    fn next(&mut self) -> Option<Section<RawJob>> {
        if self.ahead.as_slice().is_empty() {
            self.ahead = self.reading.next_batch();
        }
        let (piece, quick) = self.ahead.next()?;
        if let Some(job) = quick {
            self.ordinal += 1;
            return Some(Section {
                value: job,
                problems: Vec::new(),
            });
        }
        let Some(item) = super::pieces::job_of(piece) else {
            self.broken.set(true);
            self.reading.stop();
            self.ahead = Vec::new().into_iter();
            return None;
        };
        self.ordinal += 1;
        Some(raw::job(self.ordinal, item))
    }
}

/// A piece as written: one `[[job]]` and nothing else.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Piece {
    job: Vec<QuickJob>,
}

/// Every field a `[[job]]` may have (those of `RawJobOwn`, `RawDefaults` and `http`), in
/// one struct, so one deserialization reads them all.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QuickJob {
    name: Option<String>,
    schedule: Option<String>,
    at: Option<toml::Value>,
    schedules: Option<Vec<String>>,
    exclude: Option<Vec<toml::Value>>,
    calendars: Option<Vec<String>>,
    pool: Option<String>,
    #[serde(default, deserialize_with = "table")]
    payload: Option<Table>,
    handler: Option<String>,
    command: Option<Vec<String>>,
    user: Option<String>,
    group: Option<String>,
    #[serde(default, deserialize_with = "strings")]
    env: Option<BTreeMap<String, String>>,
    clear_env: Option<bool>,
    cwd: Option<String>,
    start_at: Option<toml::Value>,
    end_at: Option<toml::Value>,
    after: Option<Vec<String>>,
    #[serde(default, deserialize_with = "http")]
    http: Option<RawHttp>,
    timezone: Option<String>,
    timeout: Option<String>,
    overlap: Option<String>,
    catchup: Option<String>,
    catchup_window: Option<String>,
    deadline: Option<String>,
    max_attempts: Option<i64>,
    backoff: Option<String>,
    backoff_max: Option<String>,
    jitter: Option<String>,
    queue: Option<String>,
    retention: Option<String>,
    #[serde(default, deserialize_with = "table")]
    sla: Option<Table>,
    max_concurrent: Option<i64>,
}

// A field the careful way reads as a table is read here as a `toml::Value` first: `toml`
// hands a TOML date-time to a map as a one-key map of its own, which the careful way
// refuses ("got the date-time …"), so this must too.

/// A table as written, its date-times still to be read as their text ([`as_string`]).
fn table<'de, D: Deserializer<'de>>(value: D) -> Result<Option<Table>, D::Error> {
    match toml::Value::deserialize(value)? {
        toml::Value::Table(table) => Ok(Some(table)),
        _ => Err(D::Error::custom("not a table")),
    }
}

/// A table of strings as written.
fn strings<'de, D: Deserializer<'de>>(
    value: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    table(value)?
        .into_iter()
        .flatten()
        .map(|(key, value)| match value {
            toml::Value::String(s) => Ok((key, s)),
            _ => Err(D::Error::custom("not a string")),
        })
        .collect::<Result<_, _>>()
        .map(Some)
}

/// `http = { … }`, as the careful way reads the table when its every field is known and
/// of its type (date-times as their text).
fn http<'de, D: Deserializer<'de>>(value: D) -> Result<Option<RawHttp>, D::Error> {
    let table = table(value)?.unwrap_or_default();
    toml::Value::Table(table)
        .try_into()
        .map(Some)
        .map_err(D::Error::custom)
}

/// At most this many pieces make one batch: enough that handing a batch over costs
/// nothing next to reading it, few enough that the jobs read ahead of the caller take
/// little memory.
const AHEAD: usize = 4096;

/// At least this many pieces make one batch; a file of fewer pieces is read on the
/// caller's thread (a small file starts no thread).
const PER_THREAD: usize = 512;

/// The machine's cores, asked once (on Linux the answer reads the cgroup's CPU quota
/// files).
static CORES: std::sync::LazyLock<usize> =
    std::sync::LazyLock::new(|| std::thread::available_parallelism().map_or(1, usize::from));

/// The pieces of a cut file and their quick reads: made in batches by reader threads
/// while the caller resolves the batch before (the caller's own work, a job at a time in
/// file order, is then most of a load's time), or on the caller's thread for a small file
/// or a machine of one core. A reader holds at most one batch read and not yet taken, so
/// the reads ahead are bounded.
struct Reading<'t> {
    pieces: Arc<[&'t str]>,
    /// Pieces per batch.
    size: usize,
    /// The next batch to hand out.
    next: usize,
    /// One channel per reader thread: batch `b` comes from `readers[b % readers.len()]`.
    /// None: the batches are read on the caller's thread.
    readers: Vec<mpsc::Receiver<Batch<'t>>>,
}

impl<'t> Reading<'t> {
    /// Starts the reader threads of `pieces` in `scope` (one fewer than the cores, the
    /// caller's thread being busy with what they read).
    fn start<'s>(pieces: Vec<&'t str>, scope: &'s std::thread::Scope<'s, '_>) -> Self
    where
        't: 's,
    {
        let pieces: Arc<[&'t str]> = pieces.into();
        let threads = if pieces.len() < 2 * PER_THREAD {
            0
        } else {
            CORES.saturating_sub(1)
        };
        let size = pieces
            .len()
            .div_ceil(2 * threads.max(1))
            .clamp(PER_THREAD, AHEAD);
        let batches = pieces.len().div_ceil(size);
        let readers = (0..threads.min(batches))
            .map(|r| {
                let (tx, rx) = mpsc::sync_channel(1);
                let pieces = pieces.clone();
                scope.spawn(move || {
                    for b in (r..batches).step_by(threads) {
                        let from = b * size;
                        let batch = &pieces[from..(from + size).min(pieces.len())];
                        // The caller stopped taking batches: nothing more to read.
                        if tx.send(read_each(batch, from + 1)).is_err() {
                            return;
                        }
                    }
                });
                rx
            })
            .collect();
        Self {
            pieces,
            size,
            next: 0,
            readers,
        }
    }

    /// The next batch of pieces, each with its quick read; empty after the last.
    fn next_batch(&mut self) -> std::vec::IntoIter<(&'t str, Option<RawJob>)> {
        let from = self.next * self.size;
        if from >= self.pieces.len() {
            return Vec::new().into_iter();
        }
        let batch = &self.pieces[from..(from + self.size).min(self.pieces.len())];
        let jobs = match self.readers.len() {
            0 => read_each(batch, from + 1),
            n => self.readers[self.next % n]
                .recv()
                // A reader that panicked: its batch is read here (the scope then passes
                // the panic on).
                .unwrap_or_else(|_| read_each(batch, from + 1)),
        };
        self.next += 1;
        jobs.into_iter()
    }

    /// How many pieces are not handed out yet.
    fn left(&self) -> usize {
        self.pieces.len().saturating_sub(self.next * self.size)
    }

    /// Hands out no more batches, and lets the readers stop.
    fn stop(&mut self) {
        self.readers.clear();
        self.pieces = Arc::new([]);
    }
}

/// Pieces, each with its quick read when it was well formed.
type Batch<'t> = Vec<(&'t str, Option<RawJob>)>;

/// Each piece with its [`read`], the first being job #`first`.
fn read_each<'t>(pieces: &[&'t str], first: usize) -> Batch<'t> {
    pieces
        .iter()
        .enumerate()
        .map(|(i, piece)| (*piece, read(piece, first + i)))
        .collect()
}

/// The job of `piece` as the `ordinal`-th job, when it is well formed; `None` otherwise
/// (then nothing is known about it, not even that it is bad).
pub(super) fn read(piece: &str, ordinal: usize) -> Option<RawJob> {
    let Piece { job: mut jobs } = toml::from_str(piece).ok()?;
    let (Some(mut job), true) = (jobs.pop(), jobs.is_empty()) else {
        return None;
    };
    // The careful way reads every TOML date-time in a table as its text: so does this, in
    // every table a job holds as written.
    for table in [&mut job.payload, &mut job.sla].into_iter().flatten() {
        datetimes_as_strings(table);
    }
    let scope = match job.name.as_deref() {
        Some(name) if JobName::new(name).is_ok() => format!("job {name:?}"),
        _ => format!("job #{ordinal}"),
    };
    Some(RawJob {
        ordinal,
        scope,
        own: RawJobOwn {
            name: job.name,
            schedule: job.schedule,
            at: job.at.map(|mut v| {
                as_string(&mut v);
                v
            }),
            schedules: job.schedules,
            // The careful way reads every TOML date-time as its text.
            exclude: job.exclude.map(|mut items| {
                items.iter_mut().for_each(as_string);
                items
            }),
            calendars: job.calendars,
            pool: job.pool,
            payload: job.payload,
            handler: job.handler,
            command: job.command,
            user: job.user,
            group: job.group,
            env: job.env,
            clear_env: job.clear_env,
            cwd: job.cwd,
            // The careful way reads every TOML date-time as its text.
            start_at: job.start_at.map(|mut v| {
                as_string(&mut v);
                v
            }),
            end_at: job.end_at.map(|mut v| {
                as_string(&mut v);
                v
            }),
            after: job.after,
            http: None,
        },
        common: RawDefaults {
            timezone: job.timezone,
            timeout: job.timeout,
            overlap: job.overlap,
            catchup: job.catchup,
            catchup_window: job.catchup_window,
            deadline: job.deadline,
            max_attempts: job.max_attempts,
            backoff: job.backoff,
            backoff_max: job.backoff_max,
            jitter: job.jitter,
            queue: job.queue,
            retention: job.retention,
            sla: job.sla,
            max_concurrent: job.max_concurrent,
        },
        http: job.http,
        rejected: Vec::new(),
    })
}

/// Date-times in a table as the strings the careful way reads them as (reading a
/// [`toml::Value`] back gives its date-times as strings).
fn datetimes_as_strings(table: &mut Table) {
    for (_, value) in table.iter_mut() {
        as_string(value);
    }
}

fn as_string(value: &mut toml::Value) {
    match value {
        toml::Value::Datetime(d) => *value = toml::Value::String(d.to_string()),
        toml::Value::Array(items) => items.iter_mut().for_each(as_string),
        toml::Value::Table(table) => datetimes_as_strings(table),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The careful reading of a one-job text, as `raw` does it.
    fn careful(text: &str) -> Vec<String> {
        let raw = RawConfig::parse_whole(text);
        raw.jobs
            .into_sections()
            .map(|s| format!("{:?} {:?}", s.value, s.problems))
            .collect()
    }

    fn quick(text: &str) -> Option<String> {
        read(text, 1).map(|job| format!("{job:?} []"))
    }

    #[test]
    fn a_well_formed_job_reads_as_the_careful_way_reads_it() {
        let every_field = r#"[[job]]
name = "all"
schedule = "0 9 * * MON"
payload = { region = "cn", n = [1, 2], at = 1979-05-27T07:32:00Z }
command = ["/bin/report", "--daily"]
user = "report"
group = "report"
env = { LANG = "C.UTF-8" }
clear_env = true
cwd = "/srv"
start_at = 2026-12-01T09:00:00+01:00
exclude = ["0 12 * * *", 2026-12-25, "2026-12-26"]
calendars = ["holidays"]
pool = "reports"
max_concurrent = 4
end_at = "2026-12-31T18:00:00"
timezone = "Europe/Berlin"
timeout = "5m"
overlap = "allow"
catchup = "all"
catchup_window = "2h"
deadline = "none"
max_attempts = 5
backoff = "1s"
backoff_max = "1m"
jitter = "3s"
queue = "reports"
retention = "1d"
"#;
        let http = "[[job]]\nname = \"h\"\nschedule = \"@every 5m\"\n[job.http]\nurl = { env = \"URL\" }\nmethod = \"GET\"\nheaders = { \"X-Token\" = \"t\" }\n";
        let bad_name = "[[job]]\nname = \"no spaces\"\nschedule = \"@daily\"\n";
        let one_shot = "[[job]]\nname = \"o\"\nat = 2026-12-24T10:00:00+01:00\n";
        let union = "[[job]]\nname = \"u\"\nschedules = [\"0 9 * * MON-FRI\", \"0 11 * * SAT\"]\n";
        let child = "[[job]]\nname = \"c\"\nafter = [\"a\", \"b\"]\n";
        for text in [every_field, http, bad_name, one_shot, union, child] {
            assert_eq!(
                quick(text).as_deref(),
                careful(text).first().map(String::as_str)
            );
        }
    }

    #[test]
    fn what_it_reads_is_what_the_careful_way_reads() {
        for text in [
            "[[job]]\nname = \"a\"\ntimeout = 1979-05-27\n",
            "[[job]]\nname = \"a\"\npayload = { deep = [{ at = 07:32:00 }] }\n",
            "[[job]]\nname = \"a\"\nmax_attempts = 3.0\n",
            "[[job]]\nname = \"a\"\ncommand = []\nhttp = { url = \"http://h\" }\n",
            "[[job]]\nname = \"a\"\nenv = { A = 1 }\n",
        ] {
            if let Some(read) = quick(text) {
                assert_eq!(Some(read), careful(text).first().cloned(), "{text}");
            }
        }
        // Date-times in the tables a job holds as written: read as their text, as the
        // careful way reads them.
        for text in [
            "[[job]]\nname = \"a\"\nsla = { start_within = 1979-05-27T07:32:00Z }\n",
            "[[job]]\nname = \"a\"\nhttp = { url = 1979-05-27T07:32:00Z, headers = { X = 1979-05-27 } }\n",
            "[[job]]\nname = \"a\"\n[job.http]\nurl = [07:32:00]\n[job.http.headers]\nX = { env = 1979-05-27 }\n",
        ] {
            assert_eq!(
                quick(text).as_deref(),
                careful(text).first().map(String::as_str),
                "{text}"
            );
        }
    }

    #[test]
    fn anything_else_is_left_to_the_careful_way() {
        for text in [
            "[[job]]\nname = \"a\"\nschedual = \"@daily\"\n",
            "[[job]]\nname = \"a\"\nmax_attempts = \"3\"\n",
            "[[job]]\nname = \"a\"\nhttp = { methd = \"GET\" }\n",
            "[[job]]\nname = \"a\"\n[[job]]\nname = \"b\"\n",
            "[[job]]\nname = \"a\"\n[defaults]\ntimeout = \"1m\"\n",
            "[[job]]\nname = \"a\"\nname = \"b\"\n",
            // A date-time where a table must be, which `toml` would hand to a map as one.
            "[[job]]\nname = \"a\"\npayload = 1979-05-27T07:32:00Z\n",
            "[[job]]\nname = \"a\"\nsla = 1979-05-27T07:32:00Z\n",
            "[[job]]\nname = \"a\"\nenv = 1979-05-27T07:32:00Z\n",
            "[[job]]\nname = \"a\"\nhttp = 1979-05-27T07:32:00Z\n",
            "[[job]]\nname = \"a\"\nhttp = { url = \"http://h/\", headers = 1979-05-27 }\n",
        ] {
            assert!(quick(text).is_none(), "{text}");
        }
    }
}
