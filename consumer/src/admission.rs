//! Admission: whether a delivery's body can run here, decided before anything is claimed.
//!
//! Owns: opening the body's envelope once (with a keyring, its seal checked; without one,
//! a sealed body is read as it is, signing being turned on producers first), decoding the
//! occurrence once, and finding its job and the handler that runs it. A delivery comes
//! out [`Admitted`], or [`Rejected`] with its [`Reject`] reason and whatever of the body
//! did decode, so that nothing is decoded twice: the dead letter names the occurrence's key
//! and job from it, and an occurrence of a deleted runtime job is settled from it.
//!
//! Invariant: pure (no I/O). A rejected message is dead-lettered at once, never requeued
//! (G5); an unauthenticated one is never run, only named.

use cronq_shared::config::{Config, Job};
use cronq_shared::message::{DecodeError, Occurrence};
use cronq_shared::names::JobName;
use cronq_shared::signing::{Keyring, Unauthenticated};

/// Why a message is dead-lettered without running.
#[derive(Debug, thiserror::Error)]
pub enum Reject {
    /// This consumer has a keyring and the message does not open with it: never run, so
    /// that a publisher without the key cannot make the fleet run anything.
    #[error("unauthenticated: {0}")]
    Unauthenticated(#[source] Unauthenticated),
    /// Not a cronq occurrence, too large, or inconsistent.
    #[error("malformed: {0}")]
    Malformed(#[source] DecodeError),
    /// The job is not in this consumer's config.
    #[error("unknown job {0}: it is not in this consumer's config")]
    UnknownJob(JobName),
    /// The job has no handler in the config and none was registered.
    #[error("no handler registered for job {0}")]
    NoHandler(JobName),
}

impl Reject {
    /// Every [`Reject::label`], in the order of the variants.
    pub const LABELS: [&'static str; 4] =
        ["unauthenticated", "malformed", "unknown_job", "no_handler"];

    /// The `reason` label of `cronq_messages_refused_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Unauthenticated(_) => Self::LABELS[0],
            Self::Malformed(_) => Self::LABELS[1],
            Self::UnknownJob(_) => Self::LABELS[2],
            Self::NoHandler(_) => Self::LABELS[3],
        }
    }

    /// The full reason for the dead-letter record (with the decode error's cause).
    pub fn reason(&self) -> String {
        match self {
            Self::Malformed(DecodeError::Malformed(e)) => format!("{self}: {e}"),
            Self::Unauthenticated(e) => format!("unauthenticated: {e}"),
            _ => self.to_string(),
        }
    }
}

/// A delivery that can run here: its occurrence, its job, and what runs it (`R`: the
/// consumer's resolved handler).
#[derive(Debug)]
pub struct Admitted<'c, R> {
    /// The occurrence, decoded once.
    pub occ: Occurrence,
    /// Its job in the config in force.
    pub job: &'c Job,
    /// What runs it.
    pub runner: R,
}

/// A delivery that cannot run here.
#[derive(Debug)]
pub struct Rejected {
    /// Why.
    pub reject: Reject,
    /// The occurrence in the body, when it decodes (everything but `Malformed`); of an
    /// unauthenticated body it is read with its seal unchecked, to be named, never run.
    pub occ: Option<Occurrence>,
}

impl Rejected {
    /// Boxed: the rare path carries an occurrence, the common one should not move it.
    fn new(reject: Reject, occ: Option<Occurrence>) -> Box<Self> {
        Box::new(Self { reject, occ })
    }
}

/// Opens `body` (checking its seal with a `keyring`), decodes its occurrence, finds its
/// job in `config` and, with `resolve`, what runs it here (`None`: nothing does).
///
/// # Errors
/// [`Rejected`] with the reason the message cannot run, in this order: unauthenticated,
/// malformed, unknown job, no handler.
pub fn admit<'c, R>(
    body: &[u8],
    keyring: Option<&Keyring>,
    config: &'c Config,
    resolve: impl FnOnce(&Job) -> Option<R>,
) -> Result<Admitted<'c, R>, Box<Rejected>> {
    let decoded = match keyring {
        Some(keyring) => match keyring.open(body) {
            Ok(plain) => Occurrence::decode_opened(plain),
            Err(e) => {
                let named = Occurrence::decode(body).ok();
                return Err(Rejected::new(Reject::Unauthenticated(e), named));
            }
        },
        None => Occurrence::decode(body),
    };
    let occ = decoded.map_err(|e| Rejected::new(Reject::Malformed(e), None))?;
    let Some(job) = config.job(occ.job.as_str()) else {
        let reject = Reject::UnknownJob(occ.job.clone());
        return Err(Rejected::new(reject, Some(occ)));
    };
    let Some(runner) = resolve(job) else {
        let reject = Reject::NoHandler(occ.job.clone());
        return Err(Rejected::new(reject, Some(occ)));
    };
    Ok(Admitted { occ, job, runner })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn config() -> Config {
        Config::from_toml(
            r#"
[[job]]
name = "a"
schedule = "@every 1s"
command = ["true"]

[[job]]
name = "b"
schedule = "@every 1s"
"#,
            Path::new("t.toml"),
        )
        .unwrap()
    }

    use crate::sample::occurrence as sample;

    fn any(_: &Job) -> Option<()> {
        Some(())
    }

    fn configured(job: &Job) -> Option<()> {
        job.handler.as_ref().map(|_| ())
    }

    #[test]
    fn admit_rejects_with_reasons_and_keeps_what_decoded() {
        let cfg = config();
        let rejected = admit(b"{", None, &cfg, any).unwrap_err();
        let reason = rejected.reject.reason();
        assert!(
            reason.starts_with("malformed: message is not a cronq occurrence: "),
            "{reason}"
        );
        assert!(rejected.occ.is_none());
        let occ = |job: &str| sample(job).encode();
        let rejected = admit(&occ("zzz"), None, &cfg, any).unwrap_err();
        assert_eq!(
            rejected.reject.reason(),
            "unknown job zzz: it is not in this consumer's config"
        );
        assert_eq!(rejected.occ, Some(sample("zzz")));
        let rejected = admit(&occ("b"), None, &cfg, configured).unwrap_err();
        assert_eq!(rejected.reject.reason(), "no handler registered for job b");
        assert_eq!(rejected.occ, Some(sample("b")));
        let admitted = admit(&occ("a"), None, &cfg, configured).unwrap();
        assert_eq!(
            (admitted.occ, admitted.job.name.as_str()),
            (sample("a"), "a")
        );
    }

    #[test]
    fn with_a_keyring_only_what_opens_with_it_is_admitted() {
        use cronq_shared::signing::KeySource;
        let cfg = config();
        let ring = |t: &str| Keyring::parse(t, KeySource::Variable).unwrap();
        let ours = ring("k1:0123456789abcdef0123");
        let body = sample("a").encode();
        assert!(admit(&ours.seal(&body), Some(&ours), &cfg, any).is_ok());
        // Without a keyring, a sealed message runs too (signing turned on producers first).
        assert!(admit(&ours.seal(&body), None, &cfg, any).is_ok());
        let rejected = |b: &[u8]| admit(b, Some(&ours), &cfg, any).unwrap_err();
        let reason = |b: &[u8]| rejected(b).reject.reason();
        assert_eq!(reason(&body), "unauthenticated: the message is not signed");
        let theirs = ring("k1:not-our-secret-at-all");
        assert!(
            reason(&theirs.seal(&body))
                .starts_with("unauthenticated: the signature of key \"k1\" does not match")
        );
        let other = ring("k7:0123456789abcdef0123");
        assert!(reason(&other.seal(&body)).starts_with("unauthenticated: signed with key \"k7\""));
        // Unauthenticated before anything else: a forged body is not even parsed.
        assert!(reason(b"{").starts_with("unauthenticated: "));
        // A forged occurrence is named in its dead letter, read with its seal unchecked.
        assert_eq!(rejected(&theirs.seal(&body)).occ, Some(sample("a")));
    }
}
