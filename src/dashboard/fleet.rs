//! The fleet's state as one typed view: what `GET /api/v1/fleet` serializes and the Fleet
//! page (`super::pages::fleet`) renders, both from one [`Snapshot`]. A field is named once,
//! here, so a page cannot ask for a key the API does not write.
//!
//! Invariant: a [`Fleet`] is built from one snapshot and borrows it; it reads no store.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use cronq_fleet::compare::Difference;
use cronq_shared::registry::{Beat, EXPIRY, Role};
use serde::{Serialize, Serializer};

use super::snapshot::{Outage, RECENT_RUNS, Snapshot};
use super::source::QueueDepth;
use crate::output;

/// The fleet now: who leads, the instances alive, the config they run, the queues and the
/// last hour's counts.
#[derive(Debug, Serialize)]
pub struct Fleet<'s> {
    /// Where the state is: `namespace "cronq"`, `data file /x.db`.
    pub place: &'s str,
    /// Whether no change can be made (no token configured).
    pub read_only: bool,
    /// When the snapshot was taken (`None` before the first).
    #[serde(serialize_with = "opt_utc")]
    pub taken_at: Option<DateTime<Utc>>,
    /// The leader, if any.
    pub leader: Option<Leader<'s>>,
    /// The producers alive that do not lead.
    pub standbys: Vec<Instance<'s>>,
    /// The consumers alive.
    pub consumers: Vec<Instance<'s>>,
    /// The standalones alive.
    pub standalones: Vec<Instance<'s>>,
    /// After how long without a heartbeat an instance is gone.
    #[serde(rename = "instances_expire_after_ms", serialize_with = "millis")]
    pub instances_expire_after: Duration,
    /// Which instances run another config.
    pub config: ConfigCheck<'s>,
    /// Each queue's depth.
    pub queues: &'s [QueueDepth],
    /// Letters in the dead-letter queue, when known.
    pub dead_letters: Option<u64>,
    /// How many jobs the config file has.
    pub jobs: usize,
    /// How many jobs are paused.
    pub paused: usize,
    /// The last hour's counts.
    pub last_hour: LastHour,
    /// The services that do not answer now.
    pub outages: Vec<&'s Outage>,
}

/// The producer that leads.
#[derive(Debug, Serialize)]
pub struct Leader<'s> {
    /// Its instance id.
    pub instance: &'s str,
    /// Its fencing epoch.
    pub epoch: u64,
    /// Since when it leads, as its heartbeat says.
    #[serde(serialize_with = "opt_utc")]
    pub since: Option<DateTime<Utc>>,
    /// How long its lease lives unless renewed.
    #[serde(rename = "lease_left_ms", serialize_with = "millis")]
    pub lease_left: Duration,
}

/// One instance alive, from its heartbeat.
#[derive(Debug, Serialize)]
pub struct Instance<'s> {
    /// Its instance id.
    pub instance: &'s str,
    /// What it is.
    pub role: Role,
    /// Its host name.
    pub host: &'s str,
    /// Its process id.
    pub pid: u32,
    /// The cronq version it runs.
    pub version: &'s str,
    /// When it started.
    #[serde(serialize_with = "utc")]
    pub started_at: DateTime<Utc>,
    /// When it reported last.
    #[serde(serialize_with = "utc")]
    pub last_seen: DateTime<Utc>,
    /// The digest of its config.
    pub digest: &'s str,
    /// How many jobs its config has.
    pub jobs: usize,
    /// Whether its config differs from the reference one.
    pub config_differs: bool,
}

/// Whose config the others are compared with, and which differ.
#[derive(Debug, Serialize)]
pub struct ConfigCheck<'s> {
    /// The reference: the leader's config, or the dashboard's own.
    pub reference: Option<&'s str>,
    /// The instances whose config differs from it.
    pub differ: &'s [Difference],
}

/// The last hour: occurrences expected by the schedules, published, executed, and the
/// outcomes of the runs in the snapshot's window.
#[derive(Debug, Serialize)]
pub struct LastHour {
    /// Occurrences the schedules produced from `expected_from` to `expected_at`.
    pub expected: Option<usize>,
    /// Where that window starts.
    #[serde(serialize_with = "opt_precise")]
    pub expected_from: Option<DateTime<Utc>>,
    /// When it was counted.
    #[serde(serialize_with = "opt_precise")]
    pub expected_at: Option<DateTime<Utc>>,
    /// Occurrences published (the per-minute counters).
    pub published: Option<u64>,
    /// Occurrences run to a terminal outcome (the per-minute counters).
    pub executed: Option<u64>,
    /// The runs of the window that started in the hour, by outcome.
    pub outcomes: BTreeMap<&'static str, usize>,
    /// Whether the window was full, so `outcomes` may count fewer than ran.
    pub outcomes_lower_bound: bool,
    /// How many of the newest runs the window holds.
    pub window: usize,
}

impl<'s> Fleet<'s> {
    /// The fleet as `snap` shows it at `now`; `place`, `read_only` and `jobs` (the config
    /// file's) are the dashboard's own.
    pub fn of(
        snap: &'s Snapshot,
        place: &'s str,
        read_only: bool,
        jobs: usize,
        now: DateTime<Utc>,
    ) -> Self {
        let hour_ago = now - chrono::TimeDelta::hours(1);
        let instances = |keep: &dyn Fn(&Beat) -> bool| -> Vec<Instance<'s>> {
            snap.instances
                .iter()
                .filter(|b| keep(b))
                .map(|b| Instance::of(snap, b))
                .collect()
        };
        let leads = |b: &Beat| {
            snap.leader
                .as_ref()
                .is_some_and(|h| h.instance == b.instance)
        };
        Self {
            place,
            read_only,
            taken_at: snap.taken_at,
            leader: snap.leader.as_ref().map(|h| Leader {
                instance: &h.instance,
                epoch: h.epoch,
                since: snap.leading_since(),
                lease_left: h.remaining,
            }),
            standbys: instances(&|b| b.role == Role::Producer && !leads(b)),
            consumers: instances(&|b| b.role == Role::Consumer),
            standalones: instances(&|b| b.role == Role::Standalone),
            instances_expire_after: EXPIRY,
            config: ConfigCheck {
                reference: snap.reference.as_deref(),
                differ: &snap.differences,
            },
            queues: &snap.queues,
            dead_letters: snap.dead_letters,
            jobs,
            paused: snap.paused.len(),
            last_hour: LastHour {
                expected: snap.expected_last_hour,
                expected_from: snap.expected_from,
                expected_at: snap.expected_at,
                published: snap.published_last_hour,
                executed: snap.executed_last_hour,
                outcomes: snap.outcomes_since(hour_ago),
                outcomes_lower_bound: snap.recent.len() >= RECENT_RUNS,
                window: RECENT_RUNS,
            },
            outages: snap.outages(),
        }
    }
}

impl<'s> Instance<'s> {
    fn of(snap: &Snapshot, b: &'s Beat) -> Self {
        Self {
            instance: &b.instance,
            role: b.role,
            host: &b.host,
            pid: b.pid,
            version: &b.version,
            started_at: b.started_at,
            last_seen: b.last_seen,
            digest: &b.digest,
            jobs: b.jobs,
            config_differs: snap.differences.iter().any(|d| d.instance == b.instance),
        }
    }
}

/// A duration in whole milliseconds.
fn millis<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// An instant in UTC to the second, as every instant of the API but the windows.
fn utc<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&output::utc(*t))
}

fn opt_utc<S: Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
    t.map(output::utc).serialize(s)
}

/// An instant to the millisecond, for windows a client recounts.
fn opt_precise<S: Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
    t.map(output::utc_ms).serialize(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fleet_keeps_the_api_field_names_and_shapes() {
        let now: DateTime<Utc> = "2026-11-30T03:30:00Z".parse().unwrap();
        let at: DateTime<Utc> = "2026-11-30T03:29:00Z".parse().unwrap();
        let beat = |instance: &str, role| Beat {
            instance: instance.to_owned(),
            role,
            host: "h".to_owned(),
            pid: 7,
            version: "1.0.0".to_owned(),
            started_at: at,
            last_seen: now,
            digest: "d".to_owned(),
            jobs: 3,
            leading_since: (instance == "p1").then_some(at),
            serves: None,
            running: Vec::new(),
        };
        let snap = Snapshot {
            taken_at: Some(now),
            leader: Some(cronq_shared::lease::Holder {
                epoch: 4,
                instance: "p1".to_owned(),
                remaining: std::time::Duration::from_millis(1500),
            }),
            instances: vec![
                beat("c1", Role::Consumer),
                beat("p1", Role::Producer),
                beat("p2", Role::Producer),
            ],
            expected_from: Some(at),
            reference: Some("the leader's config (p1)".to_owned()),
            ..Snapshot::default()
        };
        let fleet =
            serde_json::to_value(Fleet::of(&snap, "namespace \"t\"", true, 2, now)).unwrap();
        let instance = |id: &str, role: &str| {
            serde_json::json!({
                "instance": id, "role": role, "host": "h", "pid": 7, "version": "1.0.0",
                "started_at": "2026-11-30T03:29:00Z", "last_seen": "2026-11-30T03:30:00Z",
                "digest": "d", "jobs": 3, "config_differs": false,
            })
        };
        assert_eq!(
            fleet,
            serde_json::json!({
                "place": "namespace \"t\"",
                "read_only": true,
                "taken_at": "2026-11-30T03:30:00Z",
                "leader": {
                    "instance": "p1", "epoch": 4, "since": "2026-11-30T03:29:00Z",
                    "lease_left_ms": 1500,
                },
                "standbys": [instance("p2", "producer")],
                "consumers": [instance("c1", "consumer")],
                "standalones": [],
                "instances_expire_after_ms": u64::try_from(EXPIRY.as_millis()).unwrap(),
                "config": { "reference": "the leader's config (p1)", "differ": [] },
                "queues": [],
                "dead_letters": null,
                "jobs": 2,
                "paused": 0,
                "last_hour": {
                    "expected": null,
                    "expected_from": "2026-11-30T03:29:00.000Z",
                    "expected_at": null,
                    "published": null,
                    "executed": null,
                    "outcomes": {},
                    "outcomes_lower_bound": false,
                    "window": RECENT_RUNS,
                },
                "outages": [],
            })
        );
    }
}
