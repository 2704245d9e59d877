//! AMQP message properties cronq writes and reads: occurrence headers on publish,
//! dead-letter headers, and the reconstruction of a [`DeadLetter`] from a message found in
//! the dead-letter queue, whether cronq put it there or the broker did (delivery limit).
//!
//! Invariant: a letter written by [`dead_letter_properties`] reads back, through
//! [`read_dead_letter`], equal to the original.

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};

use crate::topology::{
    DELAY_HEADER, DELIVERY_LIMIT, HEADER_ATTEMPT, HEADER_ATTEMPTS, HEADER_DEAD_LETTERED_AT,
    HEADER_ERROR, HEADER_JOB, HEADER_QUEUE, HEADER_REASON, HEADER_SCHEDULED_AT, short,
};
use cronq_shared::broker::{BrokerError, DeadLetter};
use cronq_shared::message::Occurrence;
use cronq_shared::names::{Names, QueueName};

/// `delivery_mode` 2: the broker writes the message to disk.
const PERSISTENT: u8 = 2;
const JSON: &str = "application/json";

fn text(value: impl Into<String>) -> AMQPValue {
    AMQPValue::LongString(LongString::from(value.into()))
}

fn put(headers: &mut FieldTable, key: &'static str, value: AMQPValue) {
    headers.insert(ShortString::from(key), value);
}

/// Properties of an occurrence message: persistent, JSON, `message_id` = key, and the
/// occurrence headers; with `delay_ms`, the header the delay exchange routes on.
///
/// # Errors
/// [`BrokerError::Protocol`] when the key is longer than an AMQP short string.
pub fn occurrence_properties(
    occ: &Occurrence,
    delay_ms: Option<u128>,
) -> Result<BasicProperties, BrokerError> {
    let mut headers = FieldTable::default();
    put(&mut headers, HEADER_JOB, text(occ.job.as_str()));
    put(
        &mut headers,
        HEADER_SCHEDULED_AT,
        text(
            occ.scheduled_at
                .to_rfc3339_opts(SecondsFormat::AutoSi, true),
        ),
    );
    put(
        &mut headers,
        HEADER_ATTEMPT,
        AMQPValue::LongLongInt(i64::from(occ.attempt)),
    );
    if let Some(ms) = delay_ms {
        put(&mut headers, DELAY_HEADER, text(ms.to_string()));
    }
    Ok(BasicProperties::default()
        .with_delivery_mode(PERSISTENT)
        .with_content_type(ShortString::from(JSON))
        .with_message_id(short("publish", occ.key.to_string())?)
        .with_headers(headers))
}

/// Properties of a letter put on the dead-letter queue by cronq.
///
/// # Errors
/// As [`occurrence_properties`].
pub fn dead_letter_properties(letter: &DeadLetter) -> Result<BasicProperties, BrokerError> {
    let mut headers = FieldTable::default();
    put(&mut headers, HEADER_REASON, text(letter.reason.as_str()));
    put(
        &mut headers,
        HEADER_ATTEMPTS,
        AMQPValue::LongLongInt(i64::from(letter.attempts)),
    );
    put(
        &mut headers,
        HEADER_DEAD_LETTERED_AT,
        text(
            letter
                .dead_lettered_at
                .to_rfc3339_opts(SecondsFormat::AutoSi, true),
        ),
    );
    if let Some(error) = &letter.last_error {
        put(&mut headers, HEADER_ERROR, text(error.as_str()));
    }
    if let Some(queue) = &letter.queue {
        put(&mut headers, HEADER_QUEUE, text(queue.as_str()));
    }
    if let Some(job) = &letter.job {
        put(&mut headers, HEADER_JOB, text(job.as_str()));
    }
    let mut props = BasicProperties::default()
        .with_delivery_mode(PERSISTENT)
        .with_content_type(ShortString::from(JSON))
        .with_headers(headers);
    if let Some(key) = &letter.key {
        props = props.with_message_id(short("dead-letter", key.as_str())?);
    }
    Ok(props)
}

fn as_text(value: &AMQPValue) -> Option<String> {
    match value {
        AMQPValue::LongString(s) => Some(s.to_string()),
        AMQPValue::ShortString(s) => Some(s.to_string()),
        _ => None,
    }
}

fn as_int(value: &AMQPValue) -> Option<i64> {
    match value {
        AMQPValue::ShortShortInt(v) => Some(i64::from(*v)),
        AMQPValue::ShortShortUInt(v) => Some(i64::from(*v)),
        AMQPValue::ShortInt(v) => Some(i64::from(*v)),
        AMQPValue::ShortUInt(v) => Some(i64::from(*v)),
        AMQPValue::LongInt(v) => Some(i64::from(*v)),
        AMQPValue::LongUInt(v) => Some(i64::from(*v)),
        AMQPValue::LongLongInt(v) => Some(*v),
        AMQPValue::Timestamp(v) => i64::try_from(*v).ok(),
        _ => None,
    }
}

/// Rebuilds a [`DeadLetter`] from a message of the dead-letter queue.
///
/// A message cronq dead-lettered carries `x-cronq-reason` and friends. A message the
/// broker dead-lettered (delivery limit, rejected) carries `x-first-death-reason`,
/// `x-first-death-queue` and `x-death` instead; its reason names the logical queue, e.g.
/// `delivery limit reached in queue reports`.
pub fn read_dead_letter(names: &Names, props: &BasicProperties, body: &[u8]) -> DeadLetter {
    let empty = FieldTable::default();
    let headers = props.headers().as_ref().unwrap_or(&empty);
    let get = |k: &str| headers.inner().get(k);
    let get_text = |k: &str| get(k).and_then(as_text);
    let occ = Occurrence::decode(body).ok();
    let key = props
        .message_id()
        .as_ref()
        .map(ToString::to_string)
        .or_else(|| occ.as_ref().map(|o| o.key.to_string()));
    let job = get_text(HEADER_JOB).or_else(|| occ.as_ref().map(|o| o.job.to_string()));

    if let Some(reason) = get_text(HEADER_REASON) {
        let dead_lettered_at = get_text(HEADER_DEAD_LETTERED_AT)
            .and_then(|t| DateTime::parse_from_rfc3339(&t).ok())
            .map_or(DateTime::<Utc>::UNIX_EPOCH, |t| t.with_timezone(&Utc));
        return DeadLetter {
            key,
            job,
            queue: get_text(HEADER_QUEUE).and_then(|q| QueueName::new(q).ok()),
            attempts: get(HEADER_ATTEMPTS)
                .and_then(as_int)
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(0),
            reason,
            last_error: get_text(HEADER_ERROR),
            dead_lettered_at,
            body: body.to_vec(),
        };
    }

    // Dead-lettered by the broker.
    let raw_queue = get_text("x-first-death-queue");
    let queue = raw_queue.as_deref().and_then(|q| names.logical_queue(q));
    let label = queue
        .as_ref()
        .map(ToString::to_string)
        .or(raw_queue)
        .unwrap_or_else(|| "(unknown)".to_owned());
    let death_reason = get_text("x-first-death-reason");
    let reason = match death_reason.as_deref() {
        Some("delivery_limit") => format!("delivery limit reached in queue {label}"),
        Some("rejected") => format!("rejected in queue {label}"),
        Some("expired") => format!("expired in queue {label}"),
        Some("maxlen") => format!("queue {label} was full"),
        Some(other) => format!("dead-lettered by the broker ({other}) in queue {label}"),
        None => "dead-lettered without a reason".to_owned(),
    };
    // The first x-death entry is the most recent death.
    let death = get("x-death")
        .and_then(|v| v.as_array())
        .and_then(|a| a.as_slice().first())
        .and_then(|v| v.as_field_table());
    let dead_lettered_at = death
        .and_then(|d| d.inner().get("time"))
        .and_then(as_int)
        .and_then(|secs| Utc.timestamp_opt(secs, 0).single())
        .unwrap_or(DateTime::<Utc>::UNIX_EPOCH);
    DeadLetter {
        key,
        job,
        queue,
        // The broker strips `x-delivery-count` when it dead-letters; a delivery-limit death
        // means the limit plus the one delivery over it.
        attempts: if death_reason.as_deref() == Some("delivery_limit") {
            u32::try_from(DELIVERY_LIMIT).unwrap_or(0).saturating_add(1)
        } else {
            occ.as_ref().map_or(0, |o| o.attempt)
        },
        reason,
        last_error: occ.and_then(|o| o.last_error),
        dead_lettered_at,
        body: body.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cronq_shared::names::Namespace;

    fn names() -> Names {
        Names::new(&Namespace::new("t-h").unwrap())
    }

    #[test]
    fn cronq_letters_round_trip() {
        let letter = DeadLetter {
            key: Some("j@2026-11-29T00:00:00Z".into()),
            job: Some("j".into()),
            queue: Some(QueueName::new("reports").unwrap()),
            attempts: 3,
            reason: "failed".into(),
            last_error: Some("exit status 1".into()),
            dead_lettered_at: "2026-11-29T10:00:00.123456789Z".parse().unwrap(),
            body: b"{}".to_vec(),
        };
        let props = dead_letter_properties(&letter).unwrap();
        assert_eq!(read_dead_letter(&names(), &props, b"{}"), letter);
    }

    #[test]
    fn broker_letters_name_the_logical_queue() {
        let mut headers = FieldTable::default();
        put(&mut headers, "x-first-death-reason", text("delivery_limit"));
        put(&mut headers, "x-first-death-queue", text("t-h.q.reports"));
        let props = BasicProperties::default().with_headers(headers);
        let letter = read_dead_letter(&names(), &props, b"junk");
        assert_eq!(letter.reason, "delivery limit reached in queue reports");
        assert_eq!(letter.queue, Some(QueueName::new("reports").unwrap()));
        assert_eq!(letter.key, None);
    }
}
