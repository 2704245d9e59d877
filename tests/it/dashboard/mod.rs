//! The web dashboard (`cronq dashboard`, `cronq standalone --dashboard-addr`): its JSON API
//! through a real process against RabbitMQ and Redis and against a standalone's data file
//! (`api`), and its pages in headless Chromium (`browser`): log in, pause, trigger and see
//! the run appear live, replay a dead letter, a note escaped, CSRF, read-only mode; the
//! Fleet page over real producers and consumers (`fleet`): an instance on another config
//! named on the page, `/metrics` and the leader's log, the last hour's counts against the
//! run history, a consumer killed with `kill -9` listed until its record lapses.

mod api;
mod browser;
mod cancel;
mod editor;
mod fleet;
mod follows;
mod jobs_api;
mod roles;

use crate::support::TestEnv;
use crate::support::cli;

/// `report` (daily, succeeds, records its keys) and `broken` (yearly, fails once and is
/// dead-lettered); both are triggered by the tests.
pub fn jobs(env: &TestEnv) -> String {
    format!(
        "{}\n[[job]]\nname = \"broken\"\nschedule = \"0 0 1 1 *\"\nmax_attempts = 1\ncommand = [\"sh\", \"-c\", \"echo boom >&2; exit 3\"]\n",
        cli::job(env, "report", "30 2 * * *", "timezone = \"Europe/Berlin\"")
    )
}
