//! The digest of the config a process runs: one per job, a SHA-256 of the job's effective
//! definition (its name, schedule, zone, resolved settings, payload and handler), and one
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
//! A process computes each config's digest once ([`Digester`]), and every reader (the
//! reporter, the leader's config check) shares it.

use std::fmt::Write as _;
use std::sync::Arc;

use sha2::{Digest as _, Sha256};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, Handler, Job};
use crate::config::{Origin, Secret};
use crate::names::JobName;

/// How many hex digits of the SHA-256 a digest keeps (128 bits: no collision in practice).
const HEX: usize = 32;

/// The digests of one config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigDigest {
    /// Over every job.
    pub overall: String,
    /// Each job's, in name order.
    pub jobs: Vec<(JobName, String)>,
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
    /// time, docs/benchmarks.md "Config digest").
    pub fn of(config: &Config) -> Self {
        let mut jobs: Vec<(JobName, String)> = config
            .jobs
            .iter()
            .map(|j| (j.name.clone(), job_digest(j)))
            .collect();
        jobs.sort_by(|a, b| a.0.cmp(&b.0));
        let mut all = Sha256::new();
        for (name, digest) in &jobs {
            all.update(name.as_str().as_bytes());
            all.update(b"=");
            all.update(digest.as_bytes());
            all.update(b"\n");
        }
        Self {
            overall: hex(&all.finalize()),
            jobs,
        }
    }
}

/// Computes the digest of each config a `watch` channel sends, once, and sends it on to
/// every reader: a config with 100,000 jobs takes a while to digest (docs/benchmarks.md),
/// so the reporter and the leader's config check must not each compute it.
pub struct Digester {
    config: watch::Receiver<Arc<Config>>,
    tx: watch::Sender<Arc<ConfigDigest>>,
}

impl Digester {
    /// The digest of the config `config` holds now (computed on a blocking thread), and a
    /// digester that follows the configs it sends next ([`Digester::run`]).
    pub async fn new(
        mut config: watch::Receiver<Arc<Config>>,
    ) -> (Self, watch::Receiver<Arc<ConfigDigest>>) {
        let first = ConfigDigest::of_shared(config.borrow_and_update().clone()).await;
        let (tx, rx) = watch::channel(Arc::new(first));
        (Self { config, tx }, rx)
    }

    /// Sends the digest of each new config until `token` is cancelled or the configs end
    /// (then the receivers keep the last digest). Configs sent while one is digested are
    /// coalesced: only the newest of them is digested next.
    pub async fn run(mut self, token: CancellationToken) {
        loop {
            tokio::select! {
                biased;
                () = token.cancelled() => return,
                changed = self.config.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
            let config = self.config.borrow_and_update().clone();
            let digest = tokio::select! {
                biased;
                () = token.cancelled() => return,
                d = ConfigDigest::of_shared(config) => d,
            };
            self.tx.send_replace(Arc::new(digest));
        }
    }
}

/// One job's digest.
pub fn job_digest(job: &Job) -> String {
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
    hex(&Sha256::digest(text.as_bytes()))
}

fn secret(s: &Secret) -> String {
    match s.origin() {
        Origin::Inline => format!("{:?}", s.expose()),
        Origin::Env(name) => format!("env:{name:?}"),
        Origin::File(path) => format!("file:{:?}", path.display().to_string()),
    }
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(HEX);
    for b in bytes.iter().take(HEX / 2) {
        let _ = write!(out, "{b:02x}");
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
            .zip(&changed.jobs)
            .filter(|(x, y)| x.1 != y.1)
            .map(|(x, _)| x.0.as_str())
            .collect();
        assert_eq!(differing, ["a"]);
    }
}
