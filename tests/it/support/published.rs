//! What producers published, checked: each scheduled second of a job once, none missing
//! between the first and the last, and the occurrences a trigger or backfill request asked
//! for.

use std::collections::BTreeMap;

use cronq_shared::key::OccurrenceKey;
use cronq_shared::message::{Occurrence, Trigger};

/// The keys of `msgs`, for failure messages.
pub fn keys(msgs: &[Occurrence]) -> Vec<String> {
    msgs.iter().map(|m| m.key.to_string()).collect()
}

/// `job`'s scheduled seconds, asserting none was published twice.
pub fn seconds_once(msgs: &[Occurrence], job: &str) -> BTreeMap<i64, Trigger> {
    let mut seen = BTreeMap::new();
    for m in msgs
        .iter()
        .filter(|m| m.job.as_str() == job && m.trigger != Trigger::Manual)
    {
        assert!(
            seen.insert(m.scheduled_at.timestamp(), m.trigger).is_none(),
            "key {} published twice; all: {:?}",
            m.key,
            keys(msgs)
        );
    }
    seen
}

/// Asserts there is no second missing between the first and the last.
pub fn assert_contiguous(seconds: &BTreeMap<i64, Trigger>, msgs: &[Occurrence]) {
    let (first, last) = (
        *seconds.keys().next().unwrap(),
        *seconds.keys().last().unwrap(),
    );
    let missing: Vec<i64> = (first..=last)
        .filter(|s| !seconds.contains_key(s))
        .collect();
    assert!(
        missing.is_empty(),
        "missing seconds {missing:?}; all: {:?}",
        keys(msgs)
    );
}

/// Among `msgs`: exactly the two manual triggers `k1` (configured payload) and `k2` (the
/// payload given with the request), and the three backfilled yearly keys.
pub fn assert_triggers_and_backfill(msgs: &[Occurrence], k1: &OccurrenceKey, k2: &OccurrenceKey) {
    let manual: Vec<&Occurrence> = msgs
        .iter()
        .filter(|m| m.trigger == Trigger::Manual)
        .collect();
    assert_eq!(manual.len(), 2, "{:?}", keys(msgs));
    let m1 = manual
        .iter()
        .find(|m| &m.key == k1)
        .expect("first trigger published");
    let m2 = manual
        .iter()
        .find(|m| &m.key == k2)
        .expect("second trigger published");
    assert_eq!(m1.payload, serde_json::json!({"from": "config"}));
    assert_eq!(m2.payload, serde_json::json!({"from": "cli"}));
    let mut backfilled: Vec<String> = msgs
        .iter()
        .filter(|m| m.trigger == Trigger::Backfill)
        .map(|m| m.key.to_string())
        .collect();
    backfilled.sort();
    assert_eq!(
        backfilled,
        [
            "yearly@2020-01-01T00:00:00Z",
            "yearly@2021-01-01T00:00:00Z",
            "yearly@2022-01-01T00:00:00Z"
        ]
    );
}
