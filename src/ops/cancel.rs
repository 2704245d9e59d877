//! Cancelling one occurrence (`cronq cancel KEY`, `POST /api/v1/runs/{key}/cancel`): asks
//! the ledger ([`Ledger::cancel`]) for whoever asked, makes the audit entry of the command
//! line (the dashboard makes its own, `crate::dashboard::audit`), and says what happened in
//! the words both the command line and the API answer with.
//!
//! A running attempt is stopped by its consumer within about a second and recorded
//! `cancelled` by it; a waiting, pending or retrying one is recorded `cancelled` here, at
//! once. Either way the run history says `cancelled by WHO`.

use cronq_shared::audit::Entry;
use cronq_shared::key::OccurrenceKey;
use cronq_shared::ledger::{Cancel, Cancelled, Ledger};
use cronq_shared::store::StoreError;
use serde_json::{Value, json};

/// The audit log's name of the action.
pub const ACTION: &str = "cancel";

/// Parses a key given on the command line or in a URL.
///
/// # Errors
/// A message naming the text and the expected forms.
pub fn key(text: &str) -> Result<OccurrenceKey, String> {
    text.parse().map_err(|_| {
        format!(
            "{text:?} is not an occurrence key: JOB@SCHEDULED_UTC (as `cronq runs` lists them, e.g. hello@2026-11-30T10:00:05Z) or JOB@manual-ID"
        )
    })
}

/// Cancels `key` for `who` (named in the run history: `cancelled by WHO`).
///
/// # Errors
/// [`StoreError`] when the ledger cannot be reached; nothing changed.
pub async fn cancel(
    ledger: &dyn Ledger,
    key: &OccurrenceKey,
    who: &str,
) -> Result<Cancelled, StoreError> {
    let request = Cancel {
        key: key.clone(),
        who: who.to_owned(),
    };
    ledger.cancel(&request).await
}

/// `entry` (a done entry of [`ACTION`]) completed for the cancel of `key`: its job and key,
/// refused when there was nothing to cancel.
pub fn audited(entry: Entry, key: &OccurrenceKey, cancelled: &Cancelled) -> Entry {
    let entry = entry
        .job(Some(key.job().as_str()))
        .detail(Some(key.to_string()));
    match refusal(key, cancelled) {
        Some(why) => entry.refused(&why),
        None => entry,
    }
}

/// Why nothing was cancelled, if so: no such occurrence, or it ended already.
pub fn refusal(key: &OccurrenceKey, cancelled: &Cancelled) -> Option<String> {
    match cancelled {
        Cancelled::Unknown => Some(format!(
            "no occurrence {key} is known (never claimed, or past its retention): check the key with `cronq runs --job {}`",
            key.job()
        )),
        Cancelled::Finished(state) => Some(format!(
            "occurrence {key} already ended {state}: there is nothing to cancel"
        )),
        Cancelled::Stopping | Cancelled::Ended(_) => None,
    }
}

/// What was done, in a sentence.
pub fn message(key: &OccurrenceKey, cancelled: &Cancelled) -> String {
    match cancelled {
        Cancelled::Stopping => format!(
            "asked the consumer running {key} to stop it: it stops within about a second and is recorded cancelled (see `cronq runs --key {key}`)"
        ),
        Cancelled::Ended(was) => format!("cancelled {key} (it was {was}); it will not run"),
        other => refusal(key, other).unwrap_or_default(),
    }
}

/// The answer as JSON: `key`, `result` (`stopping`, `cancelled`, `unknown`, `finished`),
/// `state` (before, for `cancelled` and `finished`), `message`.
pub fn json(key: &OccurrenceKey, cancelled: &Cancelled) -> Value {
    let (result, state) = match cancelled {
        Cancelled::Unknown => ("unknown", None),
        Cancelled::Finished(state) => ("finished", Some(state.as_str())),
        Cancelled::Stopping => ("stopping", Some("running")),
        Cancelled::Ended(was) => ("cancelled", Some(was.as_str())),
    };
    json!({
        "key": key.to_string(),
        "result": result,
        "state": state,
        "message": message(key, cancelled),
    })
}
