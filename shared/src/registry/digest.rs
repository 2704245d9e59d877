//! The digest of the config a process runs: one per job, a SHA-256 of the job's effective
//! definition (its name, schedule (with its `schedules`, `exclude` and calendars' dates),
//! zone, resolved settings (with its limits: `max_concurrent`, its pool and the pool's
//! size), payload and handler), and one
//! overall, over every job's name and digest in name order. Two processes whose overall
//! digests are equal run the same jobs the same way; where they differ, the per-job
//! digests say in which jobs.
//!
//! Invariant: the digest is of what the config means, written field by field in a fixed
//! form, not of the file's text: comments, key order and `[defaults]` versus a job's own
//! value do not change it. A secret (an `http` URL or header value) given inline counts by
//! its value; one read from the environment or a file counts by where it is read from, as
//! that value is each host's own.
//!
//! A process computes each config's digest once (`cronq_fleet::digester`), and every reader
//! (the reporter, the leader's config check) shares it: one sorted list of 32 bytes per job
//! ([`JobDigests`]; the name is the config's own `Arc`), not a map per reader, since a
//! million jobs' digests are part of the producer's memory per job (docs/benchmarks-notebook.md).

use std::fmt::Write as _;
use std::sync::Arc;

use sha2::{Digest as _, Sha256};

use crate::config::{Config, Handler, Job};
use crate::config::{Origin, Secret};
use crate::names::JobName;

/// How many hex digits of the SHA-256 a digest keeps (128 bits: no collision in practice).
const HEX: usize = 32;

/// One job's digest: the first 128 bits of the SHA-256 of its definition, held as bytes
/// (16, not a 32-digit `String` of 56 bytes and an allocation); written and read as 32
/// lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobDigest([u8; HEX / 2]);

impl JobDigest {
    /// Parses 32 hex digits (either case); `None` for anything else.
    pub fn parse(hex: &str) -> Option<Self> {
        let hex = hex.as_bytes();
        if hex.len() != HEX {
            return None;
        }
        let mut out = [0u8; HEX / 2];
        for (byte, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
            let digit = |c: u8| (c as char).to_digit(16);
            *byte = u8::try_from(digit(pair[0])? * 16 + digit(pair[1])?).ok()?;
        }
        Some(Self(out))
    }
}

impl std::fmt::Display for JobDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let digits = hex_digits(&self.0);
        // ASCII digits only.
        f.write_str(std::str::from_utf8(&digits).unwrap_or_default())
    }
}

impl std::fmt::Debug for JobDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JobDigest({self})")
    }
}

/// Every job's digest, sorted by name (so two lists compare in one merge), shared by
/// whoever reads them.
pub type JobDigests = Arc<[(JobName, JobDigest)]>;

/// `pairs` as [`JobDigests`]: sorted by name (a store hands them back in any order).
pub fn sorted(pairs: impl IntoIterator<Item = (JobName, JobDigest)>) -> JobDigests {
    let mut pairs: Vec<_> = pairs.into_iter().collect();
    pairs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    pairs.into()
}

/// The digests of one config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigDigest {
    /// Over every job.
    pub overall: String,
    /// Each job's, in name order.
    pub jobs: JobDigests,
}

impl ConfigDigest {
    /// [`ConfigDigest::of`] on a blocking thread, so that a large config does not hold up
    /// the runtime (computed here instead if that thread could not finish).
    pub async fn of_shared(config: std::sync::Arc<Config>) -> Self {
        let fallback = std::sync::Arc::clone(&config);
        tokio::task::spawn_blocking(move || Self::of(&config))
            .await
            .unwrap_or_else(|_| Self::of(&fallback))
    }

    /// The digests of `config` (linear in its jobs: a tenth to a fifth of the config load's
    /// time, docs/benchmarks-notebook.md "Config digest").
    pub fn of(config: &Config) -> Self {
        let mut jobs: Vec<(JobName, JobDigest)> = config
            .jobs
            .iter()
            .map(|j| (j.name.clone(), job_digest(j)))
            .collect();
        jobs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut all = Sha256::new();
        let mut line = String::with_capacity(HEX + 2);
        for (name, digest) in &jobs {
            line.clear();
            // The overall digest is over the hex text, as before digests were kept as bytes.
            let _ = writeln!(line, "={digest}");
            all.update(name.as_str().as_bytes());
            all.update(line.as_bytes());
        }
        Self {
            overall: String::from_utf8_lossy(&hex_digits(&all.finalize())).into_owned(),
            jobs: jobs.into(),
        }
    }
}

/// One job's digest.
pub fn job_digest(job: &Job) -> JobDigest {
    let mut text = String::with_capacity(256);
    let s = &job.settings;
    // `write!` into a String cannot fail.
    let _ = write!(
        text,
        "name={}\nschedule={}\ntimezone={}\ntimeout={}\noverlap={:?}\ncatchup={:?}\n\
         catchup_window={}\ndeadline={:?}\nmax_attempts={}\nbackoff={}\nbackoff_max={}\n\
         jitter={}\nqueue={}\nretention={}\npayload={}\n",
        job.name,
        job.schedule.as_str(),
        s.timezone.name(),
        s.timeout.as_millis(),
        s.overlap,
        s.catchup,
        s.catchup_window.as_millis(),
        s.deadline.map(|d| d.as_millis()),
        s.max_attempts,
        s.backoff.as_millis(),
        s.backoff_max.as_millis(),
        s.jitter.as_millis(),
        s.queue,
        s.retention.as_millis(),
        job.payload,
    );
    if let Some(name) = &job.handler_name {
        let _ = writeln!(text, "handler_name={name:?}");
    }
    if s.sla.is_set() {
        let _ = writeln!(text, "sla={:?}", s.sla);
    }
    // Only when set, so that the digests of jobs without limits stay what they were.
    if let Some(n) = s.max_concurrent {
        let _ = writeln!(text, "max_concurrent={n}");
    }
    if let Some(pool) = &s.pool {
        let _ = writeln!(text, "pool={:?}:{}", pool.name, pool.size);
    }
    // `schedule` above shows a union and its exclusions as written; a calendar is named
    // there, and its dates (which its file may change) count here.
    if let Some(dates) = job.schedule.excluded_dates() {
        text.push_str("excluded_dates=");
        for d in dates {
            let _ = write!(text, "{d},");
        }
        text.push('\n');
    }
    let bounds = job.schedule.bounds();
    if !bounds.is_none() {
        let _ = writeln!(text, "start_at={:?}\nend_at={:?}", bounds.start, bounds.end);
    }
    match &job.handler {
        None => text.push_str("handler=registered\n"),
        Some(Handler::Command(c)) => {
            let _ = write!(
                text,
                "command={:?}\nuser={:?}\ngroup={:?}\nenv={:?}\nclear_env={}\ncwd={:?}\n",
                c.argv, c.user, c.group, c.env, c.clear_env, c.cwd
            );
        }
        Some(Handler::Http(h)) => {
            let _ = write!(text, "http={}\nmethod={}\n", secret(&h.url), h.method);
            for (name, value) in &h.headers {
                let _ = writeln!(text, "header={name:?}:{}", secret(value));
            }
        }
    }
    let full = Sha256::digest(text.as_bytes());
    let mut out = [0u8; HEX / 2];
    out.copy_from_slice(&full[..HEX / 2]);
    JobDigest(out)
}

fn secret(s: &Secret) -> String {
    match s.origin() {
        Origin::Inline => format!("{:?}", s.expose()),
        Origin::Env(name) => format!("env:{name:?}"),
        Origin::File(path) => format!("file:{:?}", path.display().to_string()),
    }
}

/// The first [`HEX`] lowercase hex digits of `bytes`, as ASCII (written once per job of a
/// config: a table lookup into an array, not the formatter per byte nor an allocation).
fn hex_digits(bytes: &[u8]) -> [u8; HEX] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [b'0'; HEX];
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 0x0f)];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn config(text: &str) -> Config {
        Config::from_toml(text, std::path::Path::new("cronq.toml")).unwrap()
    }

    #[test]
    fn the_same_meaning_has_the_same_digest_and_a_change_names_its_job() {
        let a = config(
            "[defaults]\ntimeout = \"5m\"\n[[job]]\nname = \"a\"\nschedule = \"@every 1s\"\ncommand = [\"true\"]\n\
             [[job]]\nname = \"b\"\nschedule = \"@every 2s\"\ncommand = [\"true\"]\n",
        );
        // Another order, the default written on the job instead, and a comment.
        let same = config(
            "# moved\n[[job]]\nname = \"b\"\nschedule = \"@every 2s\"\ncommand = [\"true\"]\ntimeout = \"5m\"\n\
             [[job]]\nname = \"a\"\nschedule = \"@every 1s\"\ncommand = [\"true\"]\ntimeout = \"5m\"\n",
        );
        let changed = config(
            "[defaults]\ntimeout = \"5m\"\n[[job]]\nname = \"a\"\nschedule = \"@every 1s\"\ncommand = [\"false\"]\n\
             [[job]]\nname = \"b\"\nschedule = \"@every 2s\"\ncommand = [\"true\"]\n",
        );
        let (a, same, changed) = (
            ConfigDigest::of(&a),
            ConfigDigest::of(&same),
            ConfigDigest::of(&changed),
        );
        assert_eq!(a, same);
        assert_eq!(a.overall.len(), HEX);
        assert_ne!(a.overall, changed.overall);
        let differing: Vec<&str> = a
            .jobs
            .iter()
            .zip(changed.jobs.iter())
            .filter(|(x, y)| x.1 != y.1)
            .map(|(x, _)| x.0.as_str())
            .collect();
        assert_eq!(differing, ["a"]);
    }

    #[test]
    fn exclusions_and_a_calendar_s_dates_are_part_of_the_digest() {
        let job = |head: &str, extra: &str| {
            job_digest(
                &config(&format!(
                    "{head}[[job]]\nname = \"a\"\nschedule = \"@daily\"\n{extra}command = [\"true\"]\n"
                ))
                .jobs[0],
            )
        };
        let plain = job("", "");
        let cal = |dates: &str| format!("[calendars.h]\ndates = {dates}\n");
        let one = job(&cal("[\"2030-12-25\"]"), "calendars = [\"h\"]\n");
        let other = job(&cal("[\"2030-12-26\"]"), "calendars = [\"h\"]\n");
        let excluded = job("", "exclude = [\"2030-12-25\"]\n");
        assert_ne!(plain, one);
        assert_ne!(one, other, "the calendar's dates count, not only its name");
        assert_ne!(one, excluded);
        assert_ne!(
            job("", "exclude = [\"0 0 * * SUN\"]\n"),
            plain,
            "an exclusion counts"
        );
    }

    #[test]
    fn a_job_s_limits_and_its_pool_s_size_are_part_of_the_digest() {
        let job = |head: &str, extra: &str| {
            job_digest(
                &config(&format!(
                    "{head}[[job]]\nname = \"a\"\nschedule = \"@daily\"\n{extra}command = [\"true\"]\n"
                ))
                .jobs[0],
            )
        };
        let plain = job("", "");
        let limited = job("", "max_concurrent = 2\n");
        let pooled = |size: u32| job(&format!("[pools.p]\nsize = {size}\n"), "pool = \"p\"\n");
        assert_ne!(plain, limited);
        assert_ne!(plain, pooled(2));
        assert_ne!(
            pooled(2),
            pooled(3),
            "the pool's size counts, not only its name"
        );
        assert_eq!(
            plain,
            job("[pools.p]\nsize = 2\n", ""),
            "a pool no job names"
        );
    }

    #[test]
    fn a_job_digest_reads_back_from_its_hex() {
        let d = job_digest(
            &config("[[job]]\nname = \"a\"\nschedule = \"@every 1s\"\ncommand = [\"true\"]\n").jobs
                [0],
        );
        let text = d.to_string();
        assert_eq!(text.len(), HEX);
        assert_eq!(JobDigest::parse(&text), Some(d));
        assert_eq!(JobDigest::parse(&text.to_uppercase()), Some(d));
        assert_eq!(JobDigest::parse(&text[1..]), None);
        assert_eq!(JobDigest::parse(&format!("{}g", &text[1..])), None);
        assert_eq!(std::mem::size_of::<(JobName, JobDigest)>(), 32);
        // The digits are the formatter's `{:02x}` of each byte, as recorded digests are.
        let bytes = [
            0x00, 0x01, 0x0f, 0x10, 0x7f, 0x80, 0xab, 0xcd, 0xef, 0xff, 0x09, 0x90, 0x5a, 0xa5,
            0x3c, 0xc3,
        ];
        let formatted: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(JobDigest(bytes).to_string(), formatted);
        assert_eq!(&hex_digits(&[0xde, 0xad])[..4], b"dead");
    }
}
