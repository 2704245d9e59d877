//! `[[alert]]`: where the leader sends alerts (`docs/alerts.md`): a generic webhook
//! (HMAC-signed JSON), a Slack-compatible incoming webhook, or email over SMTP. Read field
//! by field like a job: every problem names `alert "NAME"` (or `alert #N`) and the field.
//!
//! Invariant: a resolved [`AlertSink`] can send as is: its URL is http(s) with a host, an
//! email sink has a host, a port, a sender and at least one recipient, and its secrets
//! (URL, HMAC key, SMTP password) were read ([`super::Secret`]), never shown.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use toml::{Table, Value};

use super::handler::is_http_url;
use super::raw::{describe, unknown_field};
use super::report::Report;
use super::secret::{self, Secret};
use super::suggest::did_you_mean;
use crate::redacted::Redacted;

/// What happened, as an alert names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AlertKind {
    /// An occurrence's last attempt failed: it is in the dead-letter queue.
    DeadLettered,
    /// An occurrence could not start before its `deadline`.
    Missed,
    /// An attempt failed and will be retried (opt-in).
    AttemptFailed,
    /// An attempt started later than `sla.start_within`, or has not started by then.
    LateStart,
    /// An attempt runs longer than `sla.max_duration`.
    TooLong,
    /// No success of the job within `sla.success_within`.
    NoSuccess,
    /// An occurrence the leader's reconciliation cannot account for.
    Unaccounted,
    /// No producer has held the leader lease for a while.
    NoLeader,
    /// A queue that jobs publish to has no live consumer.
    NoConsumer,
}

impl AlertKind {
    /// Every kind, in declaration order.
    pub const ALL: [Self; 9] = [
        Self::DeadLettered,
        Self::Missed,
        Self::AttemptFailed,
        Self::LateStart,
        Self::TooLong,
        Self::NoSuccess,
        Self::Unaccounted,
        Self::NoLeader,
        Self::NoConsumer,
    ];

    /// The name used in `events = [...]`, in alert bodies and in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::DeadLettered => "dead_lettered",
            Self::Missed => "missed",
            Self::AttemptFailed => "attempt_failed",
            Self::LateStart => "late_start",
            Self::TooLong => "too_long",
            Self::NoSuccess => "no_success",
            Self::Unaccounted => "unaccounted",
            Self::NoLeader => "no_leader",
            Self::NoConsumer => "no_consumer",
        }
    }

    /// Whether the kind is about one job (grouped per job, resolved by its next success),
    /// rather than about the fleet (a queue, the leader).
    pub fn is_per_job(self) -> bool {
        !matches!(self, Self::NoLeader | Self::NoConsumer)
    }
}

impl std::fmt::Display for AlertKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One `[[alert]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertSink {
    /// `name`, or `KIND #N` (its position among the `[[alert]]` tables).
    pub name: String,
    /// Where it sends.
    pub target: AlertTarget,
    /// The kinds it sends.
    pub events: BTreeSet<AlertKind>,
    /// Repeats of one job and kind within this are counted, not sent.
    pub repeat_interval: Duration,
    /// How long one send may take before it counts as failed (and is retried).
    pub timeout: Duration,
    /// The dashboard's address, for links in the alerts.
    pub dashboard_url: Option<String>,
}

/// Where an [`AlertSink`] sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlertTarget {
    /// POST of the alert as JSON, signed with HMAC-SHA-256 when `secret` is set.
    Webhook {
        /// The address.
        url: Secret,
        /// The HMAC key.
        secret: Option<Secret>,
    },
    /// POST of `{"text": …}` to a Slack-compatible incoming webhook.
    Slack {
        /// The incoming webhook's address.
        url: Secret,
    },
    /// An email over SMTP.
    Email(EmailTarget),
}

/// `kind = "email"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmailTarget {
    /// The SMTP server's host.
    pub host: String,
    /// Its port (default 587).
    pub port: u16,
    /// `tls`: how the connection is protected.
    pub tls: EmailTls,
    /// `from`.
    pub from: String,
    /// `to`: at least one.
    pub to: Vec<String>,
    /// `username`, for SMTP AUTH.
    pub username: Option<String>,
    /// `password`, for SMTP AUTH.
    pub password: Option<Secret>,
    /// `ca_file`: a PEM file of certificate authorities trusted besides the system's.
    pub ca_file: Option<PathBuf>,
}

/// How an email sink protects its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmailTls {
    /// `"starttls"` (the default): plain connection upgraded with STARTTLS, required.
    Starttls,
    /// `"tls"`: TLS from the first byte (port 465).
    Tls,
    /// `"none"`: no TLS at all (a relay on the same host only).
    None,
}

/// The fields of `[[alert]]`.
const FIELDS: &[&str] = &[
    "name",
    "kind",
    "url",
    "secret",
    "smtp",
    "tls",
    "from",
    "to",
    "username",
    "password",
    "ca_file",
    "events",
    "repeat_interval",
    "timeout",
    "dashboard_url",
];

/// What `events` accepts besides the kind names.
const EVENT_GROUPS: &[&str] = &["sla", "all"];

/// The default `repeat_interval`.
pub const DEFAULT_REPEAT: Duration = Duration::from_secs(3600);

/// The default `timeout` of one send.
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// The kinds a sink sends when `events` is not given: all but `attempt_failed`.
pub fn default_events() -> BTreeSet<AlertKind> {
    AlertKind::ALL
        .into_iter()
        .filter(|k| *k != AlertKind::AttemptFailed)
        .collect()
}

/// Resolves the `[[alert]]` tables; problems go to `out`.
pub(super) fn resolve(
    tables: Vec<Table>,
    parse_duration: impl Fn(&str) -> Result<Duration, String>,
    out: &mut Report,
) -> Vec<AlertSink> {
    let mut sinks = Vec::new();
    let mut names = BTreeSet::new();
    for (i, table) in tables.into_iter().enumerate() {
        let ordinal = i + 1;
        let scope = match table.get("name") {
            Some(Value::String(name)) => format!("alert {name:?}"),
            _ => format!("alert #{ordinal}"),
        };
        if let Some(sink) = one(&table, ordinal, &scope, &parse_duration, out) {
            if !names.insert(sink.name.clone()) {
                out.problem(
                    &scope,
                    "name",
                    format!(
                        "{:?} is already the name of another [[alert]]: give each its own",
                        sink.name
                    ),
                );
                continue;
            }
            sinks.push(sink);
        }
    }
    sinks
}

fn one(
    table: &Table,
    ordinal: usize,
    scope: &str,
    parse_duration: &impl Fn(&str) -> Result<Duration, String>,
    out: &mut Report,
) -> Option<AlertSink> {
    let before = out.problems.len();
    for key in table.keys() {
        if !FIELDS.contains(&key.as_str()) {
            out.problems
                .push(unknown_field(scope, "", key, FIELDS.iter().copied()));
        }
    }
    let text = |field: &str, out: &mut Report| -> Option<String> {
        match table.get(field)? {
            Value::String(s) => Some(s.clone()),
            other => {
                out.problem(
                    scope,
                    field,
                    format!("expected a string, got {}", describe(other)),
                );
                None
            }
        }
    };
    let kind = text("kind", out);
    let name = text("name", out);
    let target = match kind.as_deref() {
        None => {
            out.problem(
                scope,
                "kind",
                "is missing: say where alerts go, one of \"webhook\", \"slack\", \"email\"",
            );
            None
        }
        Some("webhook") => url(table, scope, out).map(|url| AlertTarget::Webhook {
            url,
            secret: table
                .get("secret")
                .and_then(|v| secret::resolve(v, scope, "secret", out)),
        }),
        Some("slack") => url(table, scope, out).map(|url| AlertTarget::Slack { url }),
        Some("email") => email(table, scope, out).map(AlertTarget::Email),
        Some(other) => {
            out.problem(
                scope,
                "kind",
                format!(
                    "{other:?} is not a kind of alert sink: use \"webhook\", \"slack\" or \"email\""
                ),
            );
            None
        }
    };
    let only_for = |field: &str, kinds: &[&str], out: &mut Report| {
        if table.contains_key(field) && kind.as_deref().is_some_and(|k| !kinds.contains(&k)) {
            out.problem(
                scope,
                field,
                format!("is only for kind {}: remove it", kinds.join(" or ")),
            );
        }
    };
    only_for("url", &["webhook", "slack"], out);
    only_for("secret", &["webhook"], out);
    for field in [
        "smtp", "tls", "from", "to", "username", "password", "ca_file",
    ] {
        only_for(field, &["email"], out);
    }
    let events = events(table.get("events"), scope, out);
    let duration = |field: &str, default: Duration, out: &mut Report| {
        let Some(text) = text(field, out) else {
            return default;
        };
        match parse_duration(&text) {
            Ok(d) if d.is_zero() => {
                out.problem(
                    scope,
                    field,
                    format!("must be longer than 0s, got {text:?}"),
                );
                default
            }
            Ok(d) => d,
            Err(message) => {
                out.problem(scope, field, message);
                default
            }
        }
    };
    let repeat_interval = duration("repeat_interval", DEFAULT_REPEAT, out);
    let timeout = duration("timeout", DEFAULT_SEND_TIMEOUT, out);
    let dashboard_url = text("dashboard_url", out).and_then(|u| {
        if u.starts_with("http://") || u.starts_with("https://") {
            Some(u.trim_end_matches('/').to_owned())
        } else {
            out.problem(
                scope,
                "dashboard_url",
                format!("{u:?} is not an http(s) address such as \"https://cronq.example.com\""),
            );
            None
        }
    });
    if out.problems.len() > before {
        return None;
    }
    let kind = kind?;
    Some(AlertSink {
        name: name.unwrap_or_else(|| format!("{kind} #{ordinal}")),
        target: target?,
        events,
        repeat_interval,
        timeout,
        dashboard_url,
    })
}

fn url(table: &Table, scope: &str, out: &mut Report) -> Option<Secret> {
    let Some(value) = table.get("url") else {
        out.problem(
            scope,
            "url",
            "is missing: give the address to POST to, such as \"https://hooks.example.com/cronq\" (or { env = \"VARIABLE\" })",
        );
        return None;
    };
    let url = secret::resolve(value, scope, "url", out)?;
    let shown = match url.origin() {
        secret::Origin::Inline => format!("{:?}", Redacted(url.expose()).to_string()),
        _ => url.to_string(),
    };
    if is_http_url(url.expose()) {
        return Some(url);
    }
    out.problem(scope, "url", format!("{shown} is not an http(s) URL"));
    None
}

fn email(table: &Table, scope: &str, out: &mut Report) -> Option<EmailTarget> {
    let string = |field: &str, out: &mut Report| match table.get(field) {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            out.problem(
                scope,
                field,
                format!("expected a string, got {}", describe(other)),
            );
            None
        }
    };
    let before = out.problems.len();
    let smtp = string("smtp", out);
    let (host, port) = match smtp.as_deref() {
        None => {
            out.problem(
                scope,
                "smtp",
                "is missing: give the SMTP server as \"host\" or \"host:port\", such as \"smtp.example.com:587\"",
            );
            (String::new(), 0)
        }
        Some(text) => match text.rsplit_once(':') {
            Some((host, port)) => match port.parse::<u16>() {
                Ok(p) if p > 0 && !host.is_empty() => (host.to_owned(), p),
                _ => {
                    out.problem(
                        scope,
                        "smtp",
                        format!("{text:?} is not \"host:port\" with a port from 1 to 65535"),
                    );
                    (String::new(), 0)
                }
            },
            None if !text.is_empty() => (text.to_owned(), 587),
            None => {
                out.problem(scope, "smtp", "is empty: give \"host\" or \"host:port\"");
                (String::new(), 0)
            }
        },
    };
    let tls = match string("tls", out).as_deref() {
        None | Some("starttls") => EmailTls::Starttls,
        Some("tls") => EmailTls::Tls,
        Some("none") => EmailTls::None,
        Some(other) => {
            out.problem(
                scope,
                "tls",
                format!("{other:?} is not one of \"starttls\", \"tls\", \"none\""),
            );
            EmailTls::Starttls
        }
    };
    let address = |text: &str| text.contains('@') && !text.contains(char::is_whitespace);
    let from = string("from", out);
    match from.as_deref() {
        None => out.problem(
            scope,
            "from",
            "is missing: give the sender, such as \"cronq@example.com\"",
        ),
        Some(f) if !address(f) => out.problem(
            scope,
            "from",
            format!("{f:?} is not an email address such as \"cronq@example.com\""),
        ),
        Some(_) => {}
    }
    let before_to = out.problems.len();
    let to: Vec<String> = match table.get("to") {
        None => {
            out.problem(
                scope,
                "to",
                "is missing: give the recipients, such as [\"ops@example.com\"]",
            );
            Vec::new()
        }
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|v| match v {
                Value::String(s) => Some(s.clone()),
                other => {
                    out.problem(
                        scope,
                        "to",
                        format!("expected strings, got {}", describe(other)),
                    );
                    None
                }
            })
            .collect(),
        Some(other) => {
            out.problem(
                scope,
                "to",
                format!(
                    "expected an array of strings such as [\"ops@example.com\"], got {}",
                    describe(other)
                ),
            );
            Vec::new()
        }
    };
    if table.contains_key("to") && to.is_empty() && out.problems.len() == before_to {
        out.problem(scope, "to", "is empty: give at least one recipient");
    }
    for t in to.iter().filter(|t| !address(t)) {
        out.problem(
            scope,
            "to",
            format!("{t:?} is not an email address such as \"ops@example.com\""),
        );
    }
    let username = string("username", out);
    let password = table
        .get("password")
        .and_then(|v| secret::resolve(v, scope, "password", out));
    if username.is_some() != (password.is_some() || table.contains_key("password")) {
        out.problem(
            scope,
            if username.is_some() {
                "password"
            } else {
                "username"
            },
            "username and password go together: give both, or neither",
        );
    }
    let ca_file = string("ca_file", out).map(PathBuf::from);
    if let Some(path) = &ca_file
        && !path.is_absolute()
    {
        out.problem(
            scope,
            "ca_file",
            format!("{} is not an absolute path", path.display()),
        );
    }
    if out.problems.len() > before {
        return None;
    }
    Some(EmailTarget {
        host,
        port,
        tls,
        from: from?,
        to,
        username,
        password,
        ca_file,
    })
}

fn events(value: Option<&Value>, scope: &str, out: &mut Report) -> BTreeSet<AlertKind> {
    let Some(value) = value else {
        return default_events();
    };
    let Value::Array(items) = value else {
        out.problem(
            scope,
            "events",
            format!(
                "expected an array such as [\"dead_lettered\", \"missed\"], got {}",
                describe(value)
            ),
        );
        return default_events();
    };
    let names: Vec<&str> = AlertKind::ALL
        .iter()
        .map(|k| k.as_str())
        .chain(EVENT_GROUPS.iter().copied())
        .collect();
    let mut events = BTreeSet::new();
    for item in items {
        let Value::String(name) = item else {
            out.problem(
                scope,
                "events",
                format!("expected strings, got {}", describe(item)),
            );
            continue;
        };
        match name.as_str() {
            "all" => events.extend(AlertKind::ALL),
            "sla" => events.extend([
                AlertKind::LateStart,
                AlertKind::TooLong,
                AlertKind::NoSuccess,
            ]),
            other => match AlertKind::ALL.iter().find(|k| k.as_str() == other) {
                Some(k) => {
                    events.insert(*k);
                }
                None => {
                    let message = match did_you_mean(other, names.iter().copied()) {
                        Some(s) => format!("{other:?} is not an event; did you mean \"{s}\"?"),
                        None => format!("{other:?} is not an event; allowed: {}", names.join(", ")),
                    };
                    out.problem(scope, "events", message);
                }
            },
        }
    }
    events
}
