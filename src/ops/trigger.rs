//! What `cronq trigger` and the dashboard's trigger share: reading the replacement payload.

/// The payload an operator typed: `None` for nothing (or only blanks), else JSON. The
/// error message starts with "is not valid JSON": the caller names the field before it.
///
/// # Errors
/// A message naming what is wrong and the expected form, for text that is not JSON.
pub fn payload(text: Option<&str>) -> Result<Option<serde_json::Value>, String> {
    match text.map(str::trim) {
        None | Some("") => Ok(None),
        Some(text) => serde_json::from_str(text).map(Some).map_err(|e| {
            format!("is not valid JSON ({e}); give a JSON value such as {{\"region\": \"cn\"}}")
        }),
    }
}
