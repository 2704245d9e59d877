//! `cronq jobs`: each job of the config, then each runtime job of the job store, with its
//! schedule, zone, next fire (in its zone and UTC), pause flag (from the control store),
//! last outcome (from the run log), whether a live consumer serves it (from the fleet
//! registry, `cronq_shared::registry::serving`) and its limits (`max_concurrent`, its pool
//! and the pool's use, from the ledger); then each pool: its size, runs and waiting runs.
//! A job that runs after others (`after`) shows its parents as its schedule and its
//! parents' next common time; a parent lists the jobs that run after it.

use anyhow::Context as _;
use chrono::Utc;
use cronq_shared::registry::serving::Fleet;

use crate::cli::{Cli, JsonArg};
use crate::ops::{self, lookup, pools};

/// Prints each job's status as a table or one JSON document.
///
/// # Errors
/// A config error; Redis unreachable, or the data file unusable.
pub async fn run(cli: &Cli, args: &JsonArg) -> anyhow::Result<()> {
    let target = crate::settings::target(cli)?;
    let (config, stores) = ops::running::config_and_stores(cli, &target).await?;
    let config = lookup::with_runtime(config, &stores).await?;
    let beats = match stores.registry.instances().await {
        Ok(beats) => Some(beats),
        Err(e) => {
            eprintln!(
                "note: cannot read the fleet registry, so whether each job is served is not shown: {e}"
            );
            None
        }
    };
    let fleet = beats.as_deref().map(Fleet::new);
    let paused = stores
        .control
        .paused()
        .await
        .context("while reading pause flags")?;
    let rows = ops::jobs::rows(
        &config,
        &*stores.runlog,
        fleet.as_ref(),
        &paused,
        Utc::now(),
    )
    .await?;
    let pools = match pools::usage(&config, &*stores.ledger).await {
        Ok(pools) => Some(pools),
        Err(e) => {
            eprintln!("note: cannot read the ledger, so the pools' use is not shown: {e:#}");
            None
        }
    };
    if args.json {
        ops::jobs::print_json(&rows, pools.as_ref());
        return Ok(());
    }
    let table = ops::jobs::table(&rows, pools.as_ref());
    if table.is_empty() {
        println!("{} defines no job", config.path.display());
    } else {
        print!("{}", table.render());
    }
    ops::jobs::print_pools(pools);
    Ok(())
}
