//! One module per subcommand; each is thin glue over the libraries.

mod audit;
mod backfill;
mod cancel;
mod check;
mod consumer;
mod dashboard;
mod dlq;
mod docs;
mod job;
mod jobs;
mod next;
mod pause;
mod plan;
mod producer;
mod runs;
mod signals;
mod standalone;
mod trigger;
mod verify;

use cronq_shared::config::ConfigError;
use tokio_util::sync::CancellationToken;

use crate::cli::{Cli, Command, DlqCommand, JobCommand};
use crate::settings::UsageError;

/// Runs the chosen subcommand.
pub async fn dispatch(cli: Cli, root: CancellationToken) -> anyhow::Result<()> {
    match &cli.command {
        Command::Check => check::run(&cli),
        Command::Next(args) => next::run(&cli, args).await,
        Command::Producer(args) => producer::run(&cli, args, root).await,
        Command::Consumer(args) => consumer::run(&cli, args, root).await,
        Command::Standalone(args) => standalone::run(&cli, args, root).await,
        Command::Dashboard(args) => dashboard::run(&cli, args, root).await,
        Command::Jobs(args) => jobs::run(&cli, args).await,
        Command::Runs(args) => runs::run(&cli, args).await,
        Command::Audit(args) => audit::run(&cli, args).await,
        Command::Verify(args) => verify::run(&cli, args).await,
        Command::Plan(args) => plan::run(&cli, args).await,
        Command::Pause(args) => pause::pause(&cli, args).await,
        Command::Resume(args) => pause::resume(&cli, args).await,
        Command::Trigger(args) => trigger::run(&cli, args).await,
        Command::Backfill(args) => backfill::run(&cli, args).await,
        Command::Cancel(args) => cancel::run(&cli, args).await,
        Command::Job(JobCommand::Apply(args)) => job::apply(&cli, args).await,
        Command::Job(JobCommand::Get(args)) => job::get(&cli, args).await,
        Command::Job(JobCommand::Delete(args)) => job::delete(&cli, args).await,
        Command::Job(JobCommand::History(args)) => job::history(&cli, args).await,
        Command::Dlq(DlqCommand::List(args)) => dlq::list(&cli, args).await,
        Command::Dlq(DlqCommand::Replay(args)) => dlq::replay(&cli, args).await,
        Command::Probe(args) => crate::admin::probe(&args.url).await,
        Command::Completions(args) => {
            docs::completions(args.shell);
            Ok(())
        }
        Command::Man(args) => docs::man(args.dir.as_deref()),
        Command::Version => {
            docs::version();
            Ok(())
        }
    }
}

/// A command's exit status other than 0, 1 or 2, after it printed everything (`cronq plan`
/// exits 3 when the config changes something): `main` exits with it and prints nothing.
#[derive(Debug, thiserror::Error)]
#[error("exit status {0}")]
pub struct Status(pub u8);

/// 2 for config and usage errors (a setting a library refused, by its error's type), 1 for
/// everything else.
pub fn exit_code(err: &anyhow::Error) -> u8 {
    let usage = err.chain().any(|e| {
        e.is::<ConfigError>()
            || e.is::<UsageError>()
            || e.is::<cronq_shared::names::NameError>()
            || e.is::<cronq_tls::TlsFileError>()
            || e.is::<cronq_shared::store::UrlError>()
            || e.is::<cronq_shared::signing::KeyError>()
            || matches!(
                e.downcast_ref::<cronq_consumer::Error>(),
                Some(cronq_consumer::Error::UnknownQueue { .. })
            )
            || matches!(
                e.downcast_ref::<cronq_shared::store::StoreError>(),
                Some(cronq_shared::store::StoreError::Unsupported { .. })
            )
    });
    if usage { 2 } else { 1 }
}
