//! The `cronq` binary: parse the command line, set up tracing and the root cancellation
//! token, dispatch to a subcommand, and map errors to exit codes (0 ok, 1 runtime failure,
//! 2 usage or config error).

mod admin;
mod cli;
mod cmd;
mod dashboard;
mod ops;
mod output;
mod secret_file;
mod service;
mod settings;
mod telemetry;

use std::process::ExitCode;

use tokio_util::sync::CancellationToken;

use crate::cli::Cli;

/// jemalloc, not the system's malloc: the load of a large config frees most of what it
/// allocates, and glibc's malloc kept tens of MiB of it for good in an idle producer
/// (docs/benchmarks-notebook.md, "The producer at a million jobs: allocator, take-over on
/// every core").
#[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Lets jemalloc's background thread return freed pages to the system on its decay
/// schedule, even while the daemon allocates nothing (an idle producer).
fn purge_in_background() {
    #[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
    if let Err(err) = tikv_jemalloc_ctl::background_thread::write(true) {
        tracing::debug!(error = %err, "jemalloc: no background thread");
    }
}

fn main() -> ExitCode {
    // lapin and redis both use rustls; pin one crypto provider so neither panics choosing.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let cli = Cli::parse_shaped(); // clap exits 2 on usage errors
    let standalone = matches!(cli.command, cli::Command::Standalone(_));
    telemetry::init(cli.log_format, telemetry::default_filter(standalone));
    // Only the daemons publish and run occurrences: only they trace.
    let traces = match cli.command {
        cli::Command::Producer(_) | cli::Command::Consumer(_) | cli::Command::Standalone(_) => {
            purge_in_background();
            telemetry::traces()
        }
        _ => telemetry::Traces::off(),
    };
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    // A consumer's deliveries are hand-offs between tasks, cheapest on one thread
    // (`cronq_consumer::DEFAULT_THREADS`); the other commands take one per core. Without
    // `--threads`, tokio's own TOKIO_WORKER_THREADS still rules where it is set.
    if let cli::Command::Consumer(args) = &cli.command {
        let threads = args.threads.or_else(|| {
            std::env::var_os("TOKIO_WORKER_THREADS")
                .is_none()
                .then_some(cronq_consumer::DEFAULT_THREADS)
        });
        if let Some(threads) = threads {
            builder.worker_threads(usize::from(threads));
        }
    }
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("cronq: cannot start the async runtime: {err}");
            return ExitCode::from(1);
        }
    };
    let root = CancellationToken::new();
    let code = match runtime.block_on(cmd::dispatch(cli, root)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => match err.downcast_ref::<cmd::Status>() {
            // A command that said all it had to say and exits with a status of its own.
            Some(cmd::Status(code)) => ExitCode::from(*code),
            None => {
                eprintln!("cronq: {}", output::chain(&err));
                ExitCode::from(cmd::exit_code(&err))
            }
        },
    };
    // After the drain (SIGTERM included): the spans of the last attempts are sent.
    traces.shutdown();
    code
}
