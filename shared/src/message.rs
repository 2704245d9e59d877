//! The wire message: one occurrence of one job, as JSON in a persistent AMQP message.
//!
//! Invariant: the body is an internally tagged, versioned enum (`"kind": "occurrence.v1"`);
//! decoding tolerates unknown fields (newer producers may add some) but refuses a body whose
//! key does not match its job and scheduled time, so a consumer never runs the wrong thing.
//! A signed body (`"kind": "signed.v1"`, [`crate::signing`]) decodes to the occurrence it
//! seals; checking its signature is the consumer's, before it decodes.

use std::fmt;

use chrono::{DateTime, FixedOffset, Utc};
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use crate::key::{OccurrenceKey, Slot};
use crate::names::JobName;

/// Bodies larger than this are refused by the consumer and dead-lettered (G5).
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;

/// Every message kind cronq puts on the wire.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind")]
pub enum Message {
    /// Version 1 of an occurrence.
    #[serde(rename = "occurrence.v1")]
    OccurrenceV1(Occurrence),
}

/// The `kind`s a body can have: an unknown one is refused by name.
#[derive(Deserialize)]
enum Kind {
    #[serde(rename = "occurrence.v1")]
    OccurrenceV1,
}

/// Decoded in one pass when `kind` comes first, as cronq writes it: the rest of the object
/// is read straight into the occurrence. serde's derive for an internally tagged enum would
/// buffer every field first to find the tag wherever it is, about 40 % of a decode
/// (`docs/benchmarks-notebook.md`, throughput). A body whose `kind` comes later (another writer)
/// takes the slow path: its fields are buffered, then read.
impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(MessageVisitor)
    }
}

struct MessageVisitor;

impl<'de> Visitor<'de> for MessageVisitor {
    type Value = Message;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a cronq message: an object with a \"kind\"")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Message, A::Error> {
        let first = map
            .next_key::<FirstKey>()?
            .ok_or_else(|| de::Error::missing_field("kind"))?;
        let first = match first {
            FirstKey::Kind => {
                let Kind::OccurrenceV1 = map.next_value()?;
                let occ = Occurrence::deserialize(MapAccessDeserializer::new(map))?;
                return Ok(Message::OccurrenceV1(occ));
            }
            FirstKey::Other(name) => name,
        };
        let mut fields = serde_json::Map::new();
        fields.insert(first, map.next_value()?);
        while let Some((name, value)) = map.next_entry::<String, serde_json::Value>()? {
            fields.insert(name, value);
        }
        let kind = fields
            .remove("kind")
            .ok_or_else(|| de::Error::missing_field("kind"))?;
        let Kind::OccurrenceV1 = Kind::deserialize(kind).map_err(de::Error::custom)?;
        let occ = Occurrence::deserialize(serde_json::Value::Object(fields))
            .map_err(de::Error::custom)?;
        Ok(Message::OccurrenceV1(occ))
    }
}

/// A message's first field name: `kind`, read without a copy, or another one.
enum FirstKey {
    Kind,
    Other(String),
}

impl<'de> Deserialize<'de> for FirstKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Name;
        impl Visitor<'_> for Name {
            type Value = FirstKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, name: &str) -> Result<FirstKey, E> {
                Ok(if name == "kind" {
                    FirstKey::Kind
                } else {
                    FirstKey::Other(name.to_owned())
                })
            }
        }
        d.deserialize_identifier(Name)
    }
}

/// [`Message`] borrowed, for encoding without copying the occurrence; the same wire form.
#[derive(Serialize)]
#[serde(tag = "kind")]
enum MessageRef<'a> {
    #[serde(rename = "occurrence.v1")]
    OccurrenceV1(&'a Occurrence),
}

/// Why an occurrence was published.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Trigger {
    /// A regular tick of the schedule.
    Schedule,
    /// Published late by a new leader, inside the catch-up window.
    Catchup,
    /// `cronq trigger`.
    Manual,
    /// `cronq backfill`.
    Backfill,
    /// `cronq dlq replay`.
    Replay,
}

impl Trigger {
    /// The lowercase name, as on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Schedule => "schedule",
            Self::Catchup => "catchup",
            Self::Manual => "manual",
            Self::Backfill => "backfill",
            Self::Replay => "replay",
        }
    }
}

/// One occurrence of one job, as carried on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Occurrence {
    /// `JOB@SCHEDULED_UTC` or `JOB@manual-ID`.
    pub key: OccurrenceKey,
    /// The job to run.
    pub job: JobName,
    /// The nominal scheduled instant (jitter never moves it); for a manual trigger, when
    /// it was requested.
    #[serde(deserialize_with = "rfc3339::utc")]
    pub scheduled_at: DateTime<Utc>,
    /// The same instant in the job's zone (`CRONQ_SCHEDULED_AT`).
    #[serde(deserialize_with = "rfc3339::fixed")]
    pub scheduled_local: DateTime<FixedOffset>,
    /// The job's IANA zone.
    pub timezone: String,
    /// Why it was published.
    pub trigger: Trigger,
    /// 1 for the first try, incremented by each retry.
    pub attempt: u32,
    /// The job's payload (or the one given to `cronq trigger --payload`).
    #[serde(default)]
    pub payload: serde_json::Value,
    /// The publishing leader's epoch (fencing token); 0 when not published by a leader.
    #[serde(default)]
    pub epoch: u64,
    /// The instant after which the occurrence must not start (`missed`), if any.
    #[serde(default, deserialize_with = "rfc3339::utc_option")]
    pub deadline: Option<DateTime<Utc>>,
    /// The error of the previous attempt, carried along retries for the dead-letter record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The W3C `traceparent` of the publish that started this occurrence's trace
    /// ([`crate::traces`]), kept by every copy (retry, redelivery, republish, replay), so
    /// all attempts of an occurrence are in one trace. Written only when the publisher
    /// traces; a handler gets it as `TRACEPARENT` or the `traceparent` header. Before
    /// `published_at`, so [`Encoded`] carries it in the body encoded ahead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// When this copy was published. The last field on the wire: [`Encoded`] stamps it
    /// onto a body encoded ahead.
    #[serde(deserialize_with = "rfc3339::utc")]
    pub published_at: DateTime<Utc>,
}

/// The instants of a body, read with chrono's strict RFC 3339 parser (what every cronq
/// writes: about a third of the instructions of its lenient one, which serde's support in
/// chrono uses), falling back to the lenient one for any other spelling.
mod rfc3339 {
    use std::fmt;

    use chrono::{DateTime, FixedOffset, Utc};
    use serde::Deserializer;
    use serde::de::{self, Visitor};

    struct Instant;

    impl Visitor<'_> for Instant {
        type Value = DateTime<FixedOffset>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an RFC 3339 date and time")
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
            DateTime::parse_from_rfc3339(text)
                .or_else(|_| text.parse())
                .map_err(E::custom)
        }
    }

    pub(super) fn fixed<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<DateTime<FixedOffset>, D::Error> {
        d.deserialize_str(Instant)
    }

    pub(super) fn utc<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        fixed(d).map(|at| at.with_timezone(&Utc))
    }

    pub(super) fn utc_option<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<DateTime<Utc>>, D::Error> {
        struct Maybe;

        impl<'de> Visitor<'de> for Maybe {
            type Value = Option<DateTime<Utc>>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an RFC 3339 date and time, or null")
            }

            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }

            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }

            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                utc(d).map(Some)
            }
        }

        d.deserialize_option(Maybe)
    }
}

/// An occurrence encoded ahead of its publishing but for its `published_at`, which
/// [`Encoded::stamp`] writes when the publishing starts: the producer encodes what is
/// due while it waits for the instant, and the stamp stays the instant the publishing
/// began (`producer/src/scheduler.rs`).
#[derive(Debug, Clone)]
pub struct Encoded {
    /// The body up to and including `"published_at":`, its last field.
    head: Vec<u8>,
}

impl Encoded {
    /// Encodes `occ` but for its `published_at`.
    pub fn new(occ: &Occurrence) -> Self {
        let mut head = occ.encode();
        // The body ends with the stamp and the closing brace.
        let tail = Stamp::new(occ.published_at).text.len() + 1;
        head.truncate(head.len() - tail);
        debug_assert!(head.ends_with(br#""published_at":"#));
        Self { head }
    }

    /// The body of the occurrence published at `stamp`: byte for byte what
    /// [`Occurrence::encode`] gives for it.
    pub fn stamp(&self, stamp: &Stamp) -> Vec<u8> {
        let mut body = Vec::with_capacity(self.head.len() + stamp.text.len() + 1);
        body.extend_from_slice(&self.head);
        body.extend_from_slice(&stamp.text);
        body.push(b'}');
        body
    }
}

/// A `published_at` as a body carries it, written once for every body of a batch
/// ([`Encoded::stamp`]).
#[derive(Debug, Clone)]
pub struct Stamp {
    text: Vec<u8>,
}

impl Stamp {
    /// The stamp of `at`.
    pub fn new(at: DateTime<Utc>) -> Self {
        Self {
            text: serde_json::to_vec(&at).expect("an instant always serialises"),
        }
    }
}

/// [`DecodeError::TooLarge`] for a body over [`MAX_MESSAGE_BYTES`].
fn check_size(body: &[u8]) -> Result<(), DecodeError> {
    if body.len() > MAX_MESSAGE_BYTES {
        return Err(DecodeError::TooLarge {
            size: body.len(),
            max: MAX_MESSAGE_BYTES,
        });
    }
    Ok(())
}

/// Why a body was refused; the text goes into the dead-letter record.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Larger than [`MAX_MESSAGE_BYTES`].
    #[error("message of {size} bytes is larger than the {max} byte limit")]
    TooLarge {
        /// The body's size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// Not JSON, unknown `kind`, or a missing or mistyped field.
    #[error("message is not a cronq occurrence")]
    Malformed(#[source] serde_json::Error),
    /// The key disagrees with the job or the scheduled time in the body.
    #[error("message key {key} does not match its job {job:?} and scheduled time {scheduled_at}")]
    KeyMismatch {
        /// The key in the body.
        key: String,
        /// The job in the body.
        job: String,
        /// The scheduled time in the body.
        scheduled_at: DateTime<Utc>,
    },
}

impl Occurrence {
    /// Encodes this occurrence as a wire body.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(&MessageRef::OccurrenceV1(self))
            .expect("an occurrence always serialises: every field is plain data")
    }

    /// Decodes and checks a wire body, plain or sealed (the seal unchecked: see
    /// [`crate::signing::Keyring::open`]).
    ///
    /// # Errors
    /// [`DecodeError`] names why the body is not a usable occurrence.
    pub fn decode(body: &[u8]) -> Result<Self, DecodeError> {
        check_size(body)?;
        Self::parse(crate::signing::unwrap(body))
    }

    /// Decodes and checks a plain wire body: one whose seal was opened already
    /// ([`crate::signing::Keyring::open`]), so that the envelope is parsed once. A body
    /// sealed again inside its seal is not an occurrence.
    ///
    /// # Errors
    /// As [`Occurrence::decode`].
    pub fn decode_opened(plain: &[u8]) -> Result<Self, DecodeError> {
        check_size(plain)?;
        Self::parse(plain)
    }

    fn parse(plain: &[u8]) -> Result<Self, DecodeError> {
        let Message::OccurrenceV1(occ) =
            serde_json::from_slice(plain).map_err(DecodeError::Malformed)?;
        let slot_ok = match occ.key.slot() {
            Slot::Scheduled(at) => *at == occ.scheduled_at,
            Slot::Manual(_) => true,
        };
        if occ.key.job() != &occ.job || !slot_ok {
            return Err(DecodeError::KeyMismatch {
                key: occ.key.to_string(),
                job: occ.job.to_string(),
                scheduled_at: occ.scheduled_at,
            });
        }
        Ok(occ)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_triggers_name_is_its_wire_form() {
        for t in [
            Trigger::Schedule,
            Trigger::Catchup,
            Trigger::Manual,
            Trigger::Backfill,
            Trigger::Replay,
        ] {
            assert_eq!(serde_json::to_value(t).unwrap(), t.as_str());
        }
    }

    fn sample() -> Occurrence {
        let at: DateTime<Utc> = "2026-11-29T19:30:00Z".parse().unwrap();
        let job = JobName::new("nightly-report").unwrap();
        Occurrence {
            key: OccurrenceKey::scheduled(job.clone(), at),
            job,
            scheduled_at: at,
            scheduled_local: "2026-11-30T03:30:00+08:00".parse().unwrap(),
            timezone: "Asia/Shanghai".into(),
            trigger: Trigger::Schedule,
            attempt: 1,
            payload: serde_json::json!({"region": "cn"}),
            epoch: 7,
            published_at: at,
            deadline: None,
            last_error: None,
            traceparent: None,
        }
    }

    #[test]
    fn round_trips_and_is_tagged() {
        let occ = sample();
        let body = occ.encode();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["kind"], "occurrence.v1");
        assert_eq!(json["key"], "nightly-report@2026-11-29T19:30:00Z");
        assert_eq!(Occurrence::decode(&body).unwrap(), occ);
        // Encoded borrowed, byte for byte the owned message's form.
        let owned = serde_json::to_vec(&Message::OccurrenceV1(occ.clone())).unwrap();
        assert_eq!(body, owned);
    }

    #[test]
    fn a_body_encoded_ahead_and_stamped_is_the_body_encoded_then() {
        let mut occ = sample();
        occ.deadline = Some("2026-11-29T19:31:00Z".parse().unwrap());
        occ.last_error = Some(r#"exit 3: "published_at":"#.into());
        let mut traced = occ.clone();
        traced.traceparent = Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into());
        for plain in [sample(), occ, traced] {
            let ahead = Encoded::new(&plain);
            for at in [
                "2026-11-29T19:30:00Z",
                "2026-11-29T19:30:00.001Z",
                "2026-11-29T19:30:00.123456789Z",
            ] {
                let mut stamped = plain.clone();
                stamped.published_at = at.parse().unwrap();
                let body = ahead.stamp(&Stamp::new(stamped.published_at));
                assert_eq!(body, stamped.encode(), "{at}");
                let decoded = Occurrence::decode(&body).unwrap();
                assert_eq!(decoded, stamped);
            }
        }
    }

    #[test]
    fn decodes_a_body_whose_kind_is_not_first() {
        let occ = sample();
        let json: serde_json::Value = serde_json::from_slice(&occ.encode()).unwrap();
        let mut fields: Vec<(String, serde_json::Value)> =
            json.as_object().unwrap().clone().into_iter().collect();
        // Another writer's order: `kind` last, then in the middle.
        fields.sort_by_key(|(name, _)| name == "kind");
        for at in [fields.len() - 1, fields.len() / 2] {
            let kind = fields.iter().position(|(name, _)| name == "kind").unwrap();
            let moved = fields.remove(kind);
            fields.insert(at, moved);
            let body = format!(
                "{{{}}}",
                fields
                    .iter()
                    .map(|(name, value)| format!("{name:?}:{value}"))
                    .collect::<Vec<_>>()
                    .join(",")
            );
            assert!(!body.starts_with(r#"{"kind""#), "{body}");
            assert_eq!(Occurrence::decode(body.as_bytes()).unwrap(), occ, "{body}");
            let unknown = body.replace("occurrence.v1", "occurrence.v9");
            assert!(matches!(
                Occurrence::decode(unknown.as_bytes()),
                Err(DecodeError::Malformed(_))
            ));
        }
        let without = serde_json::to_vec(&serde_json::Value::Object(
            fields
                .into_iter()
                .filter(|(name, _)| name != "kind")
                .collect(),
        ))
        .unwrap();
        assert!(matches!(
            Occurrence::decode(&without),
            Err(DecodeError::Malformed(_))
        ));
        assert!(matches!(
            Occurrence::decode(b"{}"),
            Err(DecodeError::Malformed(_))
        ));
    }

    #[test]
    fn reads_instants_in_any_rfc_3339_spelling() {
        let mut json: serde_json::Value = serde_json::from_slice(&sample().encode()).unwrap();
        json["published_at"] = "2026-11-29 19:30:00.5+00:00".into();
        json["scheduled_local"] = "2026-11-30t03:30:00+08:00".into();
        json["deadline"] = "2026-11-29T20:30:00+01:00".into();
        let occ = Occurrence::decode(json.to_string().as_bytes()).unwrap();
        assert_eq!(
            occ.published_at,
            "2026-11-29T19:30:00.500Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert_eq!(occ.scheduled_local, sample().scheduled_local);
        assert_eq!(occ.deadline, Some("2026-11-29T19:30:00Z".parse().unwrap()));
        json["deadline"] = serde_json::Value::Null;
        let occ = Occurrence::decode(json.to_string().as_bytes()).unwrap();
        assert_eq!(occ.deadline, None);
        json["published_at"] = "yesterday".into();
        assert!(matches!(
            Occurrence::decode(json.to_string().as_bytes()),
            Err(DecodeError::Malformed(_))
        ));
    }

    /// A traced body carries `traceparent` before `published_at`; a body without one (an
    /// older or untraced producer) decodes to `None`, and an untraced occurrence writes
    /// no field at all.
    #[test]
    fn a_traceparent_is_optional_on_the_wire() {
        let untraced = sample().encode();
        assert!(!String::from_utf8_lossy(&untraced).contains("traceparent"));
        let mut occ = sample();
        occ.traceparent = Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into());
        let body = String::from_utf8(occ.encode()).unwrap();
        assert!(
            body.contains(r#""traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","published_at":"#),
            "{body}"
        );
        assert_eq!(Occurrence::decode(body.as_bytes()).unwrap(), occ);
        assert_eq!(Occurrence::decode(&untraced).unwrap().traceparent, None);
        // Sealed, the traceparent is inside the signed bytes: it opens and decodes as is.
        let ring = crate::signing::Keyring::parse(
            "k1:0123456789abcdef0123456789abcdef",
            crate::signing::KeySource::Variable,
        )
        .unwrap();
        let sealed = ring.seal(body.as_bytes());
        assert_eq!(
            Occurrence::decode(ring.open(&sealed).unwrap()).unwrap(),
            occ
        );
        // Opened once, the inner body decodes without another look for a seal; a body
        // sealed inside its seal is not an occurrence.
        assert_eq!(
            Occurrence::decode_opened(ring.open(&sealed).unwrap()).unwrap(),
            occ
        );
        assert!(matches!(
            Occurrence::decode_opened(&sealed),
            Err(DecodeError::Malformed(_))
        ));
    }

    #[test]
    fn tolerates_unknown_fields() {
        let mut json: serde_json::Value = serde_json::from_slice(&sample().encode()).unwrap();
        json["added_later"] = serde_json::json!(true);
        assert!(Occurrence::decode(json.to_string().as_bytes()).is_ok());
    }

    #[test]
    fn refuses_bad_bodies_with_a_reason() {
        let err = Occurrence::decode(b"not json").unwrap_err();
        assert_eq!(err.to_string(), "message is not a cronq occurrence");
        let mut json: serde_json::Value = serde_json::from_slice(&sample().encode()).unwrap();
        json["kind"] = "occurrence.v9".into();
        assert!(matches!(
            Occurrence::decode(json.to_string().as_bytes()),
            Err(DecodeError::Malformed(_))
        ));
        let mut json: serde_json::Value = serde_json::from_slice(&sample().encode()).unwrap();
        json["job"] = "other".into();
        assert!(matches!(
            Occurrence::decode(json.to_string().as_bytes()),
            Err(DecodeError::KeyMismatch { .. })
        ));
        let big = vec![b' '; MAX_MESSAGE_BYTES + 1];
        assert!(matches!(
            Occurrence::decode(&big),
            Err(DecodeError::TooLarge { .. })
        ));
    }
}
