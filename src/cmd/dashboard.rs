//! `cronq dashboard`: the web dashboard and its JSON API (`crate::dashboard`) on the state
//! the operations commands use: Redis and RabbitMQ, or a standalone's data file (`--data`).

use std::sync::Arc;

use anyhow::Context as _;
use cronq_shared::names::{Names, Namespace};
use tokio_util::sync::CancellationToken;

use crate::settings::Target;
use crate::cli::{Cli, DashboardArgs};
use crate::dashboard::{self, Access, Queues, Source};
use crate::ops::{lookup, running};
use cronq_shared::config::DEFAULT_RETENTION;

/// Serves the dashboard until SIGTERM or SIGINT.
///
/// # Errors
/// A config or usage error (token, target); Redis or RabbitMQ unreachable at start, or the
/// data file unusable; the address taken.
pub async fn run(cli: &Cli, args: &DashboardArgs, root: CancellationToken) -> anyhow::Result<()> {
    let access = Access::load(
        args.token.tokens_file.as_deref(),
        args.token.dashboard_token_file.as_deref(),
    )?;
    let target = crate::settings::target(cli)?;
    // The config the target runs (`crate::ops::running`), as at the start.
    let source = match &target {
        Target::Fleet(endpoints) => {
            let (config, stores) = running::config_and_stores(cli, &target).await?;
            let config = Arc::new(config);
            let amqp = cronq_backends::broker(endpoints)
                .await
                .context("while connecting to RabbitMQ")?;
            // The queues exist once declared (as every producer and consumer does), so
            // their depths can be read without the broker refusing a passive declare.
            if let Err(err) = cronq_shared::broker::bounded(
                "declare the queues",
                cronq_shared::broker::Broker::declare(&amqp, &config.queues()),
            )
            .await
            {
                tracing::warn!(error = %anyhow::Error::new(err), "dashboard: cannot declare the queues; their depths show as unknown");
            }
            Source {
                config,
                stores,
                broker: Arc::new(amqp.clone()),
                names: amqp.names().clone(),
                queues: Queues::Amqp(amqp),
                keyring: endpoints.keyring.clone(),
                runs_indexed: false,
                store_name: "Redis",
                queue_name: "RabbitMQ",
                place: format!(
                    "namespace {:?} on RabbitMQ and Redis",
                    endpoints.namespace.as_str()
                ),
            }
        }
        Target::Data {
            path,
            sync,
            keyring,
        } => {
            let (_, stores) = lookup::open_data(path, *sync, DEFAULT_RETENTION, keyring).await?;
            let config = running::config_of(cli, &target, &stores).await?;
            drop(stores);
            let (broker, stores) =
                lookup::open_data(path, *sync, config.longest_retention(), keyring).await?;
            let config = Arc::new(config);
            data_source(
                config,
                stores,
                broker,
                keyring.clone(),
                &path.display().to_string(),
            )
        }
    };
    super::signals::cancel_on_signal(root.clone()).context("while installing signal handlers")?;
    let metrics = crate::admin::install_metrics(&source.config.metrics)?;
    dashboard::serve(args.addr, source, access, metrics, root.child_token()).await
}

/// The dashboard's source for a standalone's data file (also `cronq standalone
/// --dashboard-addr`).
pub fn data_source(
    config: Arc<cronq_shared::config::Config>,
    stores: cronq_backends::Stores,
    broker: cronq_backends::SqliteBroker,
    keyring: Option<Arc<cronq_shared::signing::Keyring>>,
    path: &str,
) -> Source {
    Source {
        config,
        stores,
        broker: Arc::new(broker.clone()),
        queues: Queues::File(broker),
        keyring,
        names: Names::new(&Namespace::default()),
        runs_indexed: true,
        store_name: "the data file",
        queue_name: "the data file",
        place: format!("data file {path}"),
    }
}

/// The dashboard's source for a standalone in memory (`cronq standalone --data :memory:
/// --dashboard-addr`): queue depths are not known there.
pub fn memory_source(
    config: Arc<cronq_shared::config::Config>,
    stores: cronq_backends::Stores,
    broker: Arc<dyn cronq_shared::broker::Broker>,
    keyring: Option<Arc<cronq_shared::signing::Keyring>>,
) -> Source {
    Source {
        config,
        stores,
        broker,
        queues: Queues::Memory,
        keyring,
        names: Names::new(&Namespace::default()),
        runs_indexed: false,
        store_name: "the standalone's memory",
        queue_name: "the standalone's memory",
        place: "a standalone in memory".to_owned(),
    }
}
