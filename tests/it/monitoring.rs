//! What `deploy/` ships for monitoring a fleet: the Prometheus alert rules pass `promtool
//! check rules` and their own unit tests (`promtool test rules`), and every query of the
//! rules and of the Grafana dashboard names a metric that real `cronq producer` and
//! `cronq consumer` processes export on `/metrics`.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use crate::standalone::{free_port, scrape};
use crate::support::cli::{WAIT, config, job, ok, ran};
use crate::support::{eventually, scoped};

const RULES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/deploy/prometheus/cronq-alerts.yml"
);
const RULE_TESTS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/deploy/prometheus/cronq-alerts.test.yml"
);
const DASHBOARD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/deploy/grafana/cronq-dashboard.json"
);

/// `promtool` (Debian package `prometheus`, installed by .ci/run), or `None` off CI
/// without it.
fn promtool() -> Option<&'static str> {
    let found = Command::new("promtool").arg("--version").output().is_ok();
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "promtool is missing under CI: .ci/run installs the prometheus package"
        );
        eprintln!("promtool not installed: the rules are not checked here");
        return None;
    }
    Some("promtool")
}

#[test]
fn the_alert_rules_pass_promtool_and_their_unit_tests() {
    let Some(promtool) = promtool() else { return };
    for args in [["check", "rules", RULES], ["test", "rules", RULE_TESTS]] {
        let out = Command::new(promtool)
            .args(args)
            .current_dir(Path::new(RULES).parent().expect("deploy/prometheus"))
            .output()
            .expect("promtool runs");
        assert!(
            out.status.success(),
            "promtool {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The `cronq_*` names in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("cronq_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

/// The PromQL of the rules file: each `expr:` with the lines indented under it.
fn rule_queries(yaml: &str) -> Vec<String> {
    let mut queries = Vec::new();
    let mut lines = yaml.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(expr) = line
            .trim_start()
            .strip_prefix("- expr:")
            .or(line.trim_start().strip_prefix("expr:"))
        else {
            continue;
        };
        let indent = line.len() - line.trim_start().len();
        let mut query = expr.trim().trim_start_matches(">-").to_owned();
        while let Some(next) = lines.peek() {
            if next.len() - next.trim_start().len() <= indent {
                break;
            }
            query.push(' ');
            query.push_str(next.trim());
            lines.next();
        }
        queries.push(query);
    }
    queries
}

/// The PromQL of the dashboard: every panel's targets and the templating queries.
fn dashboard_queries(dashboard: &serde_json::Value) -> Vec<String> {
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            queries.push(target["expr"].as_str().expect("an expr").to_owned());
        }
    }
    for var in dashboard["templating"]["list"]
        .as_array()
        .expect("variables")
    {
        if let Some(q) = var["definition"].as_str() {
            queries.push(q.to_owned());
        }
    }
    queries
}

#[tokio::test]
async fn every_query_of_the_rules_and_the_dashboard_names_a_metric_cronq_exports() {
    let rules = std::fs::read_to_string(RULES).expect("the rules file");
    let rule_queries = rule_queries(&rules);
    assert_eq!(
        rule_queries.len(),
        rules.matches("- alert:").count(),
        "one query per rule: {rule_queries:#?}"
    );
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(DASHBOARD).expect("the dashboard"))
            .expect("the dashboard is JSON");
    let queried: BTreeSet<String> = rule_queries
        .iter()
        .chain(&dashboard_queries(&dashboard))
        .flat_map(|q| metric_names(q))
        .collect();
    assert!(queried.len() >= 10, "{queried:?}");

    scoped("monitoring_metrics", |env| async move {
        let jobs = format!(
            "{}\n{}",
            job(&env, "tick", "@every 1s", ""),
            job(&env, "broken", "@every 1s", "max_attempts = 1")
                .replace("echo $CRONQ_KEY >>", "exit 1; echo"),
        );
        let cfg = config(&env, &jobs);
        let (producer, consumer) = (free_port(), free_port());
        for (name, sub, port) in [("p", "producer", producer), ("c", "consumer", consumer)] {
            let addr = format!("127.0.0.1:{port}");
            env.spawn(name, &[sub, "--config", &cfg, "--admin-addr", &addr]);
        }
        let first = eventually(WAIT, "two runs of tick", || async {
            let keys = ran(&env, "tick");
            (keys.len() >= 2).then(|| keys[0].clone())
        })
        .await;
        // A backfill of a second that already ran is acked as a duplicate without running.
        let at = first.split_once('@').expect("a key").1;
        ok(
            &env,
            &[
                "backfill", "tick", "--from", at, "--to", at, "--config", &cfg,
            ],
        );
        let deadline = std::time::Instant::now() + WAIT;
        let exported = loop {
            let text = format!(
                "{}{}",
                scrape(producer).await.unwrap_or_default(),
                scrape(consumer).await.unwrap_or_default()
            );
            let names: BTreeSet<String> = text
                .lines()
                .filter(|l| !l.starts_with('#'))
                .flat_map(metric_names)
                .collect();
            let missing: Vec<&String> = queried.difference(&names).collect();
            if missing.is_empty() {
                break names;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "queried but not exported: {missing:?}\nexported: {names:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        };
        assert!(
            exported.contains("cronq_duplicates_acked_total"),
            "{exported:?}"
        );
    })
    .await;
}
