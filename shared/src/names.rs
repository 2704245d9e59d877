//! Validated identifiers that cross crate boundaries, and the one place that formats
//! exchange, queue and Redis key names.
//!
//! Invariant: every broker object and every Redis key cronq touches starts with the
//! namespace, so several deployments (or parallel tests) share one broker and one Redis
//! without seeing each other. Nothing outside [`Names`] formats such a name.
//!
//! A name is an immutable shared string (`Arc<str>`): a producer with a million jobs keeps
//! each job's name in its config, its job table, its timer and its cursors, and cloning a
//! name shares the one allocation instead of copying it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Why a name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not a valid {what}: expected {allowed}")]
pub struct NameError {
    /// What kind of name it was meant to be.
    pub what: &'static str,
    /// The refused value.
    pub value: String,
    /// The allowed form, for the message.
    pub allowed: &'static str,
}

fn check(
    value: &str,
    what: &'static str,
    allowed: &'static str,
    max: usize,
    ok: impl Fn(char) -> bool,
) -> Result<(), NameError> {
    if value.is_empty() || value.len() > max || !value.chars().all(ok) {
        return Err(NameError {
            what,
            value: value.to_owned(),
            allowed,
        });
    }
    Ok(())
}

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident, $what:literal, $allowed:literal, $max:literal, $ok:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(Arc<str>);

        impl $name {
            /// Validates and wraps a name.
            ///
            /// # Errors
            /// When the value is empty, too long or has a character outside the allowed set.
            pub fn new(value: impl Into<String>) -> Result<Self, NameError> {
                let value = value.into();
                check(&value, $what, $allowed, $max, $ok)?;
                Ok(Self(Arc::from(value)))
            }

            /// The name as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = NameError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::new(s)
            }
        }

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                Self::new(s).map_err(serde::de::Error::custom)
            }
        }
    };
}

name_type!(
    /// A job's name: `[A-Za-z0-9_.-]{1,128}`, unique in a config.
    JobName,
    "job name",
    "1 to 128 characters from A-Z a-z 0-9 _ . -",
    128,
    |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')
);

name_type!(
    /// A logical queue name from the config (`queue = "reports"`); consumers choose which
    /// queues they serve.
    QueueName,
    "queue name",
    "1 to 64 characters from A-Z a-z 0-9 _ . -",
    64,
    |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')
);

name_type!(
    /// The deployment prefix (`CRONQ_NAMESPACE`): `[a-z0-9_.-]{1,64}`.
    Namespace,
    "namespace",
    "1 to 64 characters from a-z 0-9 _ . -",
    64,
    |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '.' | '-')
);

impl Default for Namespace {
    fn default() -> Self {
        Self(Arc::from("cronq"))
    }
}

/// Formats every broker object name and Redis key of one namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    ns: Namespace,
}

impl Names {
    /// Names for one namespace.
    pub fn new(ns: &Namespace) -> Self {
        Self { ns: ns.clone() }
    }

    /// The namespace these names live in.
    pub fn namespace(&self) -> &Namespace {
        &self.ns
    }

    /// The durable direct exchange every occurrence is published to; the routing key is the
    /// logical queue name.
    pub fn exchange(&self) -> String {
        format!("{}.occurrences", self.ns)
    }

    /// The durable quorum queue that holds the occurrences of one logical queue.
    pub fn queue(&self, queue: &QueueName) -> String {
        format!("{}.q.{queue}", self.ns)
    }

    /// The exchange the broker dead-letters to (delivery limit reached, rejected).
    pub fn dead_letter_exchange(&self) -> String {
        format!("{}.dlx", self.ns)
    }

    /// The one dead-letter queue of the namespace.
    pub fn dead_letter_queue(&self) -> String {
        format!("{}.dlq", self.ns)
    }

    /// A delay queue whose messages expire after `delay` and dead-letter back to
    /// [`Names::exchange`] with their original routing key. (The classic delay queues of
    /// earlier versions were `ns.delay.<d>ms`: a quorum queue cannot take their name.)
    pub fn delay_queue(&self, delay: Duration) -> String {
        format!("{}.delayed.{}ms", self.ns, delay.as_millis())
    }

    /// The durable headers exchange delayed messages are published to: it routes on the
    /// delay header to [`Names::delay_queue`], so the routing key (the logical queue) is
    /// kept for when the message expires back into [`Names::exchange`].
    pub fn delay_exchange(&self) -> String {
        format!("{}.delayed", self.ns)
    }

    /// The logical queue behind a broker queue name made by [`Names::queue`], if it is one
    /// of this namespace's.
    pub fn logical_queue(&self, queue: &str) -> Option<QueueName> {
        let rest = queue.strip_prefix(self.ns.as_str())?.strip_prefix(".q.")?;
        QueueName::new(rest).ok()
    }

    /// A Redis key under the namespace: `ns:part1:part2…`.
    pub fn redis_key(&self, parts: &[&str]) -> String {
        let ns = self.ns.as_str();
        let mut key =
            String::with_capacity(ns.len() + parts.iter().map(|p| 1 + p.len()).sum::<usize>());
        key.push_str(ns);
        for part in parts {
            key.push(':');
            key.push_str(part);
        }
        key
    }

    /// The pattern that matches every Redis key of the namespace (for `SCAN` in clean-up).
    pub fn redis_pattern(&self) -> String {
        format!("{}:*", self.ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_prefixed() {
        let names = Names::new(&Namespace::new("t-x").unwrap());
        assert_eq!(names.exchange(), "t-x.occurrences");
        assert_eq!(
            names.queue(&QueueName::new("reports").unwrap()),
            "t-x.q.reports"
        );
        assert_eq!(
            names.delay_queue(Duration::from_secs(10)),
            "t-x.delayed.10000ms"
        );
        assert_eq!(names.redis_key(&["occ", "a@b"]), "t-x:occ:a@b");
        assert_eq!(
            names.logical_queue("t-x.q.reports"),
            Some(QueueName::new("reports").unwrap())
        );
        assert_eq!(names.logical_queue("t-y.q.reports"), None);
        assert_eq!(names.logical_queue("t-x.dlq"), None);
    }

    #[test]
    fn bad_names_are_refused() {
        assert!(JobName::new("nightly report").is_err());
        assert!(JobName::new("").is_err());
        assert!(JobName::new("x".repeat(129)).is_err());
        assert!(JobName::new("a.b-c_D9").is_ok());
        assert!(Namespace::new("Upper").is_err());
        assert!(Namespace::new("t-ok_1.2").is_ok());
    }
}
