//! Retrying with backoff: the one primitive behind every retried operation in cronq.
//!
//! A [`Backoff`] is an explicit schedule, written as a `const` beside its use with the
//! reason for its numbers: exponential (each wait doubles, the schedule of the `backon`
//! crate), capped, and jittered (each wait is shortened by up to [`JITTER`] at random, so
//! a fleet that failed together does not retry in lockstep, and no wait exceeds the cap).
//! It ends after a number of tries ([`Backoff::tries`]), after a time ([`Backoff::within`]),
//! or never; [`retry`] runs an operation along it, and its [`CancellationToken`] stops the
//! waiting between tries (never a try in flight: dropping the future does that).
//!
//! Invariant: each retried operation retries in exactly one layer, the one that knows how
//! long it is worth trying:
//!
//! | operation | retried by | schedule |
//! | --- | --- | --- |
//! | a broker call (publish, dead letter, declare, subscribe, list) | the broker backend, for what may pass (a lost connection: reconnect, redo), until the call succeeds, is refused, or is dropped | `cronq-rabbitmq`'s `RECONNECT` |
//! | connecting to RabbitMQ, re-subscribing | the broker backend | `RECONNECT`, within the connect timeout / until its token |
//! | the leader's publishes, queue declarations and cursor and pause reads | the leader, for what the broker refuses and for store errors, while it leads | `cronq-producer`'s `LEADER_RETRY` |
//! | a consumer's claim | the consumer, until shutdown (the delivery stays unacked) | `cronq-consumer`'s `CLAIM_RETRY` |
//! | recording an attempt's end | the consumer, a few tries, then the lease lapses | `cronq-consumer`'s `COMPLETE_RETRY` |
//!
//! Callers of a broker call that cannot wait for ever (a consumer's dead letter or retry
//! message, a consumer starting, a command) bound it with [`crate::broker::bounded`]: a
//! deadline, not a second retry loop. The stores (Redis ledger, control, run log) never
//! retry a command: their callers above do (the Redis client only re-establishes its
//! connection by itself, `cronq-redis`'s `connect`). The other periodic loops (lease
//! renewal, the reaper's sweeps, control polls) are not retries: they run on their own
//! period whether the last round failed or not.

use std::future::Future;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The largest share of a wait that jitter takes off it.
pub const JITTER: f64 = 0.2;

/// A retry schedule: waits from `first`, doubling up to `max`, each jittered.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    schedule: ExponentialBuilder,
    within: Option<Duration>,
}

impl Backoff {
    /// Waits `first`, then twice as long after each failure, up to `max`; tries until the
    /// operation succeeds or the token is cancelled.
    pub const fn exponential(first: Duration, max: Duration) -> Self {
        Self {
            schedule: ExponentialBuilder::new()
                .with_factor(2.0)
                .with_min_delay(first)
                .with_max_delay(max)
                .without_max_times(),
            within: None,
        }
    }

    /// At most `tries` tries in all, the first included (at least one).
    pub const fn tries(self, tries: usize) -> Self {
        Self {
            schedule: self.schedule.with_max_times(tries.saturating_sub(1)),
            ..self
        }
    }

    /// No try starts `within` or more after the first one did.
    pub const fn within(self, within: Duration) -> Self {
        Self {
            within: Some(within),
            ..self
        }
    }

    /// The waits between tries, in order, jittered; ends when the tries run out.
    pub fn waits(&self) -> impl Iterator<Item = Duration> + use<> {
        self.schedule
            .build()
            .map(|wait| wait.mul_f64(1.0 - JITTER * rand::random::<f64>()))
    }
}

/// A failed try that is about to be retried, for the caller's log line.
#[derive(Debug)]
pub struct Retrying<'a, E> {
    /// Why the try failed.
    pub error: &'a E,
    /// How many tries failed so far (1 after the first).
    pub failures: usize,
    /// How long until the next try.
    pub wait: Duration,
    /// Time since the first try started.
    pub elapsed: Duration,
}

/// Why [`retry`] stopped without a success.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GaveUp<E> {
    /// The schedule ran out (its tries or its time).
    Exhausted {
        /// The last try's error.
        last: E,
        /// How many tries failed.
        failures: usize,
        /// Time since the first try started.
        elapsed: Duration,
    },
    /// The token was cancelled while waiting for the next try.
    Cancelled {
        /// The last try's error.
        last: E,
    },
}

impl<E> GaveUp<E> {
    /// The last try's error.
    pub fn into_last(self) -> E {
        match self {
            Self::Exhausted { last, .. } | Self::Cancelled { last } => last,
        }
    }
}

/// Runs `op` until it succeeds, waiting along `backoff` after each failure; `notify` sees
/// each failure that will be retried (log it there). A try whose error must not be
/// retried (a refusal, a lost leadership) returns it as a success of the try,
/// `Ok(Err(e))`, and gets it back so.
///
/// # Errors
/// [`GaveUp`] with the last error, when `backoff` ran out or `token` was cancelled while
/// waiting.
///
/// # Cancel safety
/// Cancel-safe when `op`'s futures are: dropping it drops the try in flight.
pub async fn retry<T, E, Fut>(
    backoff: Backoff,
    token: &CancellationToken,
    mut op: impl FnMut() -> Fut,
    mut notify: impl FnMut(&Retrying<'_, E>),
) -> Result<T, GaveUp<E>>
where
    Fut: Future<Output = Result<T, E>>,
{
    let started = Instant::now();
    let mut waits = backoff.waits();
    let mut failures = 0;
    loop {
        let error = match op().await {
            Ok(value) => return Ok(value),
            Err(error) => error,
        };
        failures += 1;
        let elapsed = started.elapsed();
        let wait = match waits.next() {
            Some(wait) if backoff.within.is_none_or(|limit| elapsed + wait < limit) => wait,
            _ => {
                return Err(GaveUp::Exhausted {
                    last: error,
                    failures,
                    elapsed,
                });
            }
        };
        notify(&Retrying {
            error: &error,
            failures,
            wait,
            elapsed,
        });
        if token
            .run_until_cancelled(tokio::time::sleep(wait))
            .await
            .is_none()
        {
            return Err(GaveUp::Cancelled { last: error });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn waits_double_up_to_the_cap_with_jitter_below() {
        let backoff = Backoff::exponential(100 * MS, 1000 * MS).tries(7);
        let waits: Vec<Duration> = backoff.waits().collect();
        let nominal = [100, 200, 400, 800, 1000, 1000].map(|ms| ms * MS);
        assert_eq!(waits.len(), nominal.len(), "{waits:?}");
        for (wait, nominal) in waits.iter().zip(nominal) {
            assert!(*wait <= nominal, "{wait:?} above {nominal:?}");
            assert!(
                *wait >= nominal.mul_f64(1.0 - JITTER) - MS,
                "{wait:?} far below {nominal:?}"
            );
        }
        assert_eq!(Backoff::exponential(MS, MS).tries(1).waits().count(), 0);
        assert_eq!(Backoff::exponential(MS, MS).tries(0).waits().count(), 0);
        assert_eq!(Backoff::exponential(MS, MS).waits().take(100).count(), 100);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_until_success_and_reports_each_failure() {
        let calls = Cell::new(0);
        let mut seen = Vec::new();
        let got = retry(
            Backoff::exponential(100 * MS, 100 * MS),
            &CancellationToken::new(),
            || {
                calls.set(calls.get() + 1);
                let n = calls.get();
                async move { if n < 3 { Err(n) } else { Ok("done") } }
            },
            |r| seen.push((*r.error, r.failures)),
        )
        .await;
        assert_eq!(got, Ok("done"));
        assert_eq!(seen, [(1, 1), (2, 2)]);
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_after_its_tries_with_the_last_error() {
        let calls = Cell::new(0);
        let got: Result<(), _> = retry(
            Backoff::exponential(100 * MS, 100 * MS).tries(3),
            &CancellationToken::new(),
            || {
                calls.set(calls.get() + 1);
                let n = calls.get();
                async move { Err(n) }
            },
            |_| {},
        )
        .await;
        assert_eq!(calls.get(), 3);
        assert!(
            matches!(
                got,
                Err(GaveUp::Exhausted {
                    last: 3,
                    failures: 3,
                    ..
                })
            ),
            "{got:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn starts_no_try_past_its_time() {
        let started = Instant::now();
        let got: Result<(), GaveUp<()>> = retry(
            // Jittered waits are 800 to 1000 ms: the third try starts by 2.0 s, a fourth
            // could not start before 2.4 s.
            Backoff::exponential(1000 * MS, 1000 * MS).within(2300 * MS),
            &CancellationToken::new(),
            || async { Err(()) },
            |_| {},
        )
        .await;
        assert!(
            matches!(got, Err(GaveUp::Exhausted { failures: 3, .. })),
            "{got:?}"
        );
        assert!(started.elapsed() < 2300 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_token_stops_the_waiting() {
        let token = CancellationToken::new();
        let started = Instant::now();
        let got: Result<(), _> = retry(
            Backoff::exponential(Duration::from_secs(60), Duration::from_secs(60)),
            &token,
            || async { Err("down") },
            |_| token.cancel(),
        )
        .await;
        assert_eq!(got, Err(GaveUp::Cancelled { last: "down" }));
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_is_handed_back_without_retrying() {
        let calls = Cell::new(0);
        let got: Result<Result<(), &str>, GaveUp<()>> = retry(
            Backoff::exponential(MS, MS),
            &CancellationToken::new(),
            || {
                calls.set(calls.get() + 1);
                async { Ok(Err("refused")) }
            },
            |_| {},
        )
        .await;
        assert_eq!(got, Ok(Err("refused")));
        assert_eq!(calls.get(), 1);
    }
}
