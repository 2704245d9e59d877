//! The backends every behavioural suite runs on, and the one way to run a suite on each:
//! [`on_every_backend!`] makes one test per [`Backend`], each under a fresh [`TestEnv`].
//!
//! A suite is written once as a plain `async fn(Backend, TestEnv)`. The consumer and
//! producer suites take those as they are; a port suite (broker, ledger, run log, lease,
//! control) is a generic `async fn` over the port, called by a small adapter of that shape
//! that builds the port with [`super::ports`].
//!
//! Adding a backend is a variant of [`Backend`] and one line in [`on_every_backend!`];
//! the compiler then points at every place that builds ports for a backend
//! ([`super::ports`], [`super::fleet`], [`super::producers`], [`super::deployment`]).

use std::future::Future;

use super::{TestEnv, scoped};

/// Which implementation of the ports a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `MemoryBroker`, `MemoryLedger`, `MemoryRunLog`, `MemoryLease`, `MemoryControl`
    /// (what `cronq standalone` runs on).
    Memory,
    /// `AmqpBroker` on RabbitMQ; `RedisLedger`, `RedisRunLog`, `RedisLease` and
    /// `RedisControl` on Redis.
    Real,
    /// `SqliteBroker`, `SqliteLedger`, `SqliteRunLog`, `SqliteLease` and `SqliteControl` on
    /// one SQLite file in the test's directory (what `cronq standalone --data` runs on).
    Sqlite,
}

impl Backend {
    /// The backend's name in test names and namespaces.
    pub fn label(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Real => "real",
            Self::Sqlite => "sqlite",
        }
    }
}

/// Runs one behaviour (`suite`) under a fresh [`TestEnv`] on `backend`; `test` names the
/// namespace (`t-<test>-<backend>-<random hex>`).
pub async fn run<F, Fut>(backend: Backend, test: &str, suite: F)
where
    F: FnOnce(Backend, TestEnv) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    scoped(&format!("{test}-{}", backend.label()), |env| {
        suite(backend, env)
    })
    .await;
}

/// Instantiates a suite written once as `async fn(Backend, TestEnv)` as one test per
/// backend, `<suite>::memory`, `<suite>::real` and `<suite>::sqlite`. `$short` names the test's namespace (at
/// most 64 characters in all); anything after it goes to `#[tokio::test(…)]`, e.g.
/// `flavor = "multi_thread"`.
macro_rules! on_every_backend {
    ($suite:ident, $short:literal $(, $($flavour:tt)+)?) => {
        mod $suite {
            $crate::support::backends::on_every_backend!(@test $suite, $short, memory, Memory, $($($flavour)+)?);
            $crate::support::backends::on_every_backend!(@test $suite, $short, real, Real, $($($flavour)+)?);
            $crate::support::backends::on_every_backend!(@test $suite, $short, sqlite, Sqlite, $($($flavour)+)?);
        }
    };
    (@test $suite:ident, $short:literal, $test:ident, $backend:ident, $($flavour:tt)*) => {
        #[tokio::test($($flavour)*)]
        async fn $test() {
            $crate::support::backends::run(
                $crate::support::backends::Backend::$backend,
                $short,
                super::$suite,
            )
            .await;
        }
    };
}

pub(crate) use on_every_backend;
