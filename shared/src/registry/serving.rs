//! Whether some live consumer runs a job: the fleet registry's beats say which queues each
//! consumer (or standalone) consumes and which handlers it offers ([`Serves`]); a job is
//! served when a live consumer of its queue offers its handler. The leader logs and
//! exports what is unserved (`cronq_producer::serving_check`); `cronq jobs` and the
//! dashboard's jobs page show it (docs/runtime-jobs.md, "Unserved jobs").
//!
//! What offers a job's handler:
//! - `handler = "NAME"`: a consumer reporting `NAME` among its handlers (a `[handlers.NAME]`
//!   of its config, or one registered in Rust by name), or a Rust handler registered for
//!   the job's own name;
//! - an inline `command` or `http`: every consumer of its queue (they share the file);
//! - neither (a handler an embedding program registers by job name): a consumer reporting
//!   the job among its Rust-registered jobs.
//!
//! A beat without [`Serves`] (a consumer of a version that did not report it) counts as
//! serving every job, so an upgrade in progress never raises a false alarm.

use std::collections::HashSet;

use crate::config::Job;

use super::{Beat, Role, Serves};

/// Whether a job runs somewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Service {
    /// A live consumer of its queue offers its handler.
    Served,
    /// Some consumer lives, but none of its queue offers its handler: the reason says
    /// which part is missing.
    Unserved(String),
    /// No consumer (nor standalone) reports itself at all.
    NoConsumer,
}

impl Service {
    /// `served`, `unserved` or `no consumer`: the state's name in JSON and on pages.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Served => "served",
            Self::Unserved(_) => "unserved",
            Self::NoConsumer => "no consumer",
        }
    }

    /// Why it is not served (`None` when it is).
    pub fn reason(&self) -> Option<String> {
        match self {
            Self::Served => None,
            Self::Unserved(why) => Some(why.clone()),
            Self::NoConsumer => Some("no consumer is running".to_owned()),
        }
    }
}

/// One consumer's report, indexed.
struct Offer<'b> {
    /// `None`: every queue; or the reported ones.
    queues: Option<HashSet<&'b str>>,
    handlers: HashSet<&'b str>,
    jobs: HashSet<&'b str>,
}

/// What the live consumers of a fleet serve, built once from the registry's beats.
pub struct Fleet<'b> {
    /// `None` for a consumer that did not report what it serves.
    offers: Vec<Option<Offer<'b>>>,
}

impl<'b> Fleet<'b> {
    /// The consumers and standalones among `beats` (producers are left out).
    pub fn new(beats: &'b [Beat]) -> Self {
        let offers = beats
            .iter()
            .filter(|b| matches!(b.role, Role::Consumer | Role::Standalone))
            .map(|b| b.serves.as_ref().map(Offer::of))
            .collect();
        Self { offers }
    }

    /// How many consumers (and standalones) report themselves.
    pub fn consumers(&self) -> usize {
        self.offers.len()
    }

    /// Whether `job` runs on some live consumer, or why not.
    pub fn assess(&self, job: &Job) -> Service {
        if self.offers.is_empty() {
            return Service::NoConsumer;
        }
        let queue = job.queue.as_str();
        let mut on_queue = 0;
        for offer in &self.offers {
            let Some(offer) = offer else {
                return Service::Served;
            };
            if offer.queues.as_ref().is_some_and(|q| !q.contains(queue)) {
                continue;
            }
            on_queue += 1;
            if offer.runs(job) {
                return Service::Served;
            }
        }
        if on_queue == 0 {
            return Service::Unserved(format!("no consumer consumes queue {queue:?}"));
        }
        Service::Unserved(match job.handler_name.as_deref() {
            Some(name) => format!("no consumer of queue {queue:?} offers handler {name:?}"),
            None => format!(
                "no consumer of queue {queue:?} registers a handler for job {:?}",
                job.name.as_str()
            ),
        })
    }
}

impl<'b> Offer<'b> {
    fn of(serves: &'b Serves) -> Self {
        Self {
            queues: serves
                .queues
                .as_ref()
                .map(|q| q.iter().map(String::as_str).collect()),
            handlers: serves.handlers.iter().map(String::as_str).collect(),
            jobs: serves.jobs.iter().map(String::as_str).collect(),
        }
    }

    fn runs(&self, job: &Job) -> bool {
        if self.jobs.contains(job.name.as_str()) {
            return true;
        }
        match job.handler_name.as_deref() {
            Some(name) => self.handlers.contains(name),
            None => job.handler.is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use chrono::Utc;

    use super::*;
    use crate::config::Config;

    fn beat(role: Role, serves: Option<Serves>) -> Beat {
        Beat {
            instance: "i".to_owned(),
            role,
            host: "h".to_owned(),
            pid: 1,
            version: "0".to_owned(),
            started_at: Utc::now(),
            last_seen: Utc::now(),
            digest: String::new(),
            jobs: 0,
            leading_since: None,
            serves,
            running: Vec::new(),
        }
    }

    fn serves(queues: Option<&[&str]>, handlers: &[&str], jobs: &[&str]) -> Option<Serves> {
        let strings = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        Some(Serves {
            queues: queues.map(strings),
            handlers: strings(handlers),
            jobs: strings(jobs),
        })
    }

    fn config() -> Config {
        Config::from_toml(
            "[handlers.report]\ncommand = [\"true\"]\n\n\
             [[job]]\nname = \"named\"\nschedule = \"@every 1s\"\nhandler = \"report\"\n\n\
             [[job]]\nname = \"inline\"\nschedule = \"@every 1s\"\ncommand = [\"true\"]\nqueue = \"batch\"\n\n\
             [[job]]\nname = \"embedded\"\nschedule = \"@every 1s\"\n",
            Path::new("cronq.toml"),
        )
        .unwrap()
    }

    fn states(beats: &[Beat]) -> Vec<Service> {
        let config = config();
        let fleet = Fleet::new(beats);
        config.jobs.iter().map(|j| fleet.assess(j)).collect()
    }

    #[test]
    fn no_consumer_at_all_is_not_unserved() {
        let producer = beat(Role::Producer, None);
        assert_eq!(states(&[producer]), vec![Service::NoConsumer; 3]);
    }

    #[test]
    fn a_job_is_served_by_a_consumer_of_its_queue_offering_its_handler() {
        let all = beat(Role::Consumer, serves(None, &["report"], &["embedded"]));
        assert_eq!(states(&[all]), vec![Service::Served; 3]);

        let default_only = beat(Role::Consumer, serves(Some(&["default"]), &[], &[]));
        assert_eq!(
            states(&[default_only]),
            [
                Service::Unserved(
                    "no consumer of queue \"default\" offers handler \"report\"".into()
                ),
                Service::Unserved("no consumer consumes queue \"batch\"".into()),
                Service::Unserved(
                    "no consumer of queue \"default\" registers a handler for job \"embedded\""
                        .into()
                ),
            ]
        );

        let split = [
            beat(Role::Consumer, serves(Some(&["batch"]), &["report"], &[])),
            beat(
                Role::Standalone,
                serves(Some(&["default"]), &["report"], &[]),
            ),
        ];
        assert_eq!(
            states(&split),
            [
                Service::Served,
                Service::Served,
                Service::Unserved(
                    "no consumer of queue \"default\" registers a handler for job \"embedded\""
                        .into()
                ),
            ]
        );
    }

    #[test]
    fn a_consumer_that_does_not_say_what_it_serves_serves_everything() {
        let old = beat(Role::Consumer, None);
        assert_eq!(states(&[old]), vec![Service::Served; 3]);
    }

    #[test]
    fn a_beat_without_serves_still_reads() {
        let json = serde_json::to_string(&beat(Role::Consumer, None)).unwrap();
        assert!(!json.contains("serves"), "{json}");
        let back: Beat = serde_json::from_str(&json).unwrap();
        assert_eq!(back.serves, None);
    }
}
