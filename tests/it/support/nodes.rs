//! The extra RabbitMQ node that fault tests may stop and start (`scripts/test-nodes`), so
//! that no test ever touches the shared broker on 5672 that every other test runs on.
//!
//! Only one test may restart the node (tests run in parallel): a second one would need to
//! live in the same test fn.

use std::process::Command;
use std::time::{Duration, Instant};

/// The env var naming the node's AMQP URL.
pub const RESTART_AMQP_URL: &str = "CRONQ_TEST_RESTART_AMQP_URL";
/// The env var naming the node (`cronq-restart@localhost`), for `rabbitmqctl -n`.
pub const RESTART_NODE: &str = "CRONQ_TEST_RESTART_NODE";

/// The node a test may restart.
#[derive(Debug, Clone)]
pub struct RestartNode {
    /// Its Erlang node name.
    pub name: String,
    /// Its AMQP URL (guest/guest, loopback only).
    pub amqp_url: String,
}

/// The node from the environment `scripts/test-nodes` prints.
///
/// # Panics
/// When the variables are unset: the test cannot run, and must not pass silently.
pub fn restart_node() -> RestartNode {
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!(
                "{name} is not set: this test restarts a RabbitMQ node of its own. Start it \
                 with `eval \"$(scripts/test-nodes)\"` (scripts/test does), then run the test \
                 again"
            )
        })
    };
    RestartNode {
        amqp_url: var(RESTART_AMQP_URL),
        name: var(RESTART_NODE),
    }
}

fn rabbitmqctl(node: &str, args: &[&str]) -> std::process::Output {
    Command::new("rabbitmqctl")
        .args(["-q", "-n", node])
        .args(args)
        .output()
        .expect("rabbitmqctl runs (the fault tests need RabbitMQ's CLI)")
}

impl RestartNode {
    /// Stops the broker application (the Erlang node stays up, as with
    /// `rabbitmqctl stop_app`): every connection to it drops. The broker is started
    /// again by [`Outage::end`], or when the guard is dropped (a failing test).
    ///
    /// # Panics
    /// When `rabbitmqctl stop_app` fails.
    pub fn stop_app(&self) -> Outage<'_> {
        let out = rabbitmqctl(&self.name, &["stop_app"]);
        assert!(
            out.status.success(),
            "rabbitmqctl -n {} stop_app failed: {}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
        Outage {
            node: self,
            stopped: Instant::now(),
            ended: false,
        }
    }

    fn start_app(&self) -> Result<(), String> {
        for args in [&["start_app"][..], &["await_startup", "--timeout", "60"]] {
            let out = rabbitmqctl(&self.name, args);
            if !out.status.success() {
                return Err(format!(
                    "rabbitmqctl -n {} {}: {}",
                    self.name,
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        Ok(())
    }
}

/// The broker application of a [`RestartNode`] is stopped while this lives.
pub struct Outage<'a> {
    node: &'a RestartNode,
    stopped: Instant,
    ended: bool,
}

impl Outage<'_> {
    /// Starts the broker again and waits until it serves; returns how long it was down.
    ///
    /// # Panics
    /// When it does not start.
    pub fn end(mut self) -> Duration {
        self.ended = true;
        if let Err(err) = self.node.start_app() {
            panic!("the broker did not start again: {err}");
        }
        self.stopped.elapsed()
    }
}

impl Drop for Outage<'_> {
    fn drop(&mut self) {
        if !self.ended
            && let Err(err) = self.node.start_app()
        {
            eprintln!("could not start the broker again after a failed test: {err}");
        }
    }
}

/// Every queue on `node`, by name (empty when `rabbitmqctl` cannot reach it).
pub fn queues(node: &str) -> Vec<String> {
    let out = rabbitmqctl(node, &["list_queues", "name", "--no-table-headers"]);
    if !out.status.success() {
        eprintln!(
            "rabbitmqctl -n {node} list_queues failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return Vec::new();
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `url` without its credentials, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}
