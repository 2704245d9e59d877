//! What every subcommand reads besides its own arguments: the config file, and where the
//! state is (the service endpoints, or a standalone's data file), from flags and
//! environment; and [`UsageError`], for what clap cannot check.
//!
//! Invariant: a missing or unusable setting is a [`UsageError`] or a config error (exit
//! code 2), never a runtime failure.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use cronq_backends::RedisUrl;
use cronq_shared::config::Config;
use cronq_shared::endpoints::Endpoints;
use cronq_shared::names::Namespace;
use cronq_shared::signing::{KEY_FILE_VARIABLE, KEY_VARIABLE, KeySource, Keyring};

use crate::cli::Cli;

/// A usage error found after clap (exit code 2). A library's own error for a setting it
/// refuses (a Redis URL, a signing key, a `--queues` name) is passed on as it is, keeping
/// its sources, and counted as a usage error by its type (`crate::cmd::exit_code`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Checks what only the machine that runs the jobs can: each command's `user`, `group` and
/// `cwd` (see `cronq_consumer::check_commands`), for `consumer` and `standalone`.
///
/// # Errors
/// A [`UsageError`] with one line per problem, each naming the file, the job and the field.
pub fn check_commands(cli: &Cli, config: &Config) -> anyhow::Result<()> {
    cronq_consumer::check_commands(config).map_err(|problems| {
        let file = cli
            .config
            .as_deref()
            .map_or_else(|| "the config".to_owned(), |p| p.display().to_string());
        let lines: Vec<String> = problems.iter().map(|p| format!("{file}: {p}")).collect();
        UsageError(format!(
            "cannot run the config's commands here ({} problem{}):\n{}",
            lines.len(),
            if lines.len() == 1 { "" } else { "s" },
            lines.join("\n")
        ))
        .into()
    })
}

/// Loads the config named by `--config` or `CRONQ_CONFIG`.
pub fn load_config(cli: &Cli) -> anyhow::Result<Config> {
    let path = cli.config.as_deref().ok_or_else(|| {
        UsageError("no config file: pass --config FILE or set CRONQ_CONFIG".into())
    })?;
    Ok(Config::load(Path::new(path))?)
}

/// Loads the config named by `--config` or `CRONQ_CONFIG`, with the text it was read from
/// (what a leader records for the operations commands, `cronq_shared::recorded`).
pub fn load_config_and_text(cli: &Cli) -> anyhow::Result<(Config, Arc<str>)> {
    let path = cli.config.as_deref().ok_or_else(|| {
        UsageError("no config file: pass --config FILE or set CRONQ_CONFIG".into())
    })?;
    let load = cronq_shared::recorded::load_file(Path::new(path))?;
    let config = Arc::try_unwrap(load.config).unwrap_or_else(|shared| (*shared).clone());
    Ok((config, load.text))
}

/// The service endpoints, their TLS files and the namespace from flags and environment.
///
/// # Errors
/// A usage error for a Redis URL in none of the forms taken, a TLS file that cannot be used
/// (a [`cronq_tls::TlsFileError`]), a bad namespace.
pub fn endpoints(cli: &Cli) -> anyhow::Result<Endpoints> {
    if let Some(data) = &cli.data {
        // Only `producer` and `consumer` get here with a data file: say it is not used.
        tracing::warn!(
            data = %data.display(),
            "--data (CRONQ_DATA) is for `cronq standalone` and the operations commands; this command runs on RabbitMQ and Redis and does not use it"
        );
    }
    let namespace = Namespace::new(&cli.namespace).context("CRONQ_NAMESPACE")?;
    RedisUrl::parse(&cli.redis_url)?;
    let tls = cronq_tls::load(
        cli.tls_ca_file.as_deref(),
        cli.tls_cert_file.as_deref(),
        cli.tls_key_file.as_deref(),
    )?;
    Ok(Endpoints {
        amqp_url: cli.amqp_url.clone(),
        amqp_quorum_size: cli.amqp_quorum_size,
        redis_url: cli.redis_url.clone(),
        redis_min_replicas: cli.redis_min_replicas,
        namespace,
        keyring: keyring(cli)?,
        tls,
    })
}

/// The message signing keys, from `CRONQ_SIGNING_KEY` or the file of `--signing-key-file`
/// (`CRONQ_SIGNING_KEY_FILE`); `None` when neither is set (messages are not signed).
///
/// # Errors
/// A usage error when both are set, the file cannot be read, or a key is not usable
/// (each names the variable or file and the entry, never a secret).
pub fn keyring(cli: &Cli) -> anyhow::Result<Option<Arc<Keyring>>> {
    let ring = match (Keyring::from_variable()?, &cli.signing_key_file) {
        (Some(_), Some(file)) => {
            return Err(UsageError(format!(
                "{KEY_VARIABLE} and --signing-key-file ({KEY_FILE_VARIABLE}) {} are both set: keep one",
                file.display()
            ))
            .into());
        }
        (Some(ring), None) => Ok(ring),
        (None, Some(file)) => {
            let text = crate::secret_file::read(
                file,
                &format!("--signing-key-file ({KEY_FILE_VARIABLE})"),
                "the signing key file",
            )?;
            Keyring::parse(&text, KeySource::File(&file.display().to_string()))
        }
        (None, None) => return Ok(None),
    };
    let ring = ring?;
    tracing::debug!(signs_with = ring.signing_id(), accepts = ?ring.ids().collect::<Vec<_>>(), "message signing on");
    Ok(Some(Arc::new(ring)))
}

/// What `--data` says for `:memory:`: the state lives in the standalone's process.
pub const IN_MEMORY: &str = ":memory:";

/// The data file `cronq standalone` uses when `--data` and `CRONQ_DATA` are not given.
pub const DEFAULT_DATA: &str = "cronq.db";

/// Where a command finds the state: the fleet's services, a standalone's data file, or (for
/// `cronq standalone` only) its memory.
pub use cronq_backends::Target;

/// The target of an operations command: `--data` when given, else the fleet (never
/// [`Target::Memory`]).
///
/// # Errors
/// A usage error for `--data :memory:` (no other process can reach that), a bad namespace.
pub fn target(cli: &Cli) -> anyhow::Result<Target> {
    match &cli.data {
        Some(path) if path.as_os_str() == IN_MEMORY => Err(UsageError(format!(
            "--data {IN_MEMORY}: a standalone in memory keeps its state in its own process, out of reach of other commands; give the data file of `cronq standalone --data PATH`"
        ))
        .into()),
        Some(path) => Ok(Target::Data {
            path: path.clone(),
            sync: cli.data_sync.into(),
            keyring: keyring(cli)?,
        }),
        None => Ok(Target::Fleet(endpoints(cli)?)),
    }
}

/// The data file of `cronq standalone`, made absolute; `None` for `--data :memory:`.
pub fn standalone_data(cli: &Cli) -> anyhow::Result<Option<PathBuf>> {
    let path = cli
        .data
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA));
    if path.as_os_str() == IN_MEMORY {
        return Ok(None);
    }
    Ok(Some(
        std::path::absolute(&path).with_context(|| format!("--data {}", path.display()))?,
    ))
}

/// The target of `cronq standalone` on `data` (its data file, or memory for `None`), with
/// `keyring`.
pub fn standalone_target(
    cli: &Cli,
    data: Option<PathBuf>,
    keyring: Option<Arc<Keyring>>,
) -> Target {
    match data {
        Some(path) => Target::Data {
            path,
            sync: cli.data_sync.into(),
            keyring,
        },
        None => Target::Memory { keyring },
    }
}
