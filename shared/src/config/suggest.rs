//! "Did you mean …" suggestions for misspelt names: config fields, enum values, time zones
//! and job names.
//!
//! Invariant: a suggestion is only offered when it is close enough to be a likely typo, so
//! an unrelated word never gets a misleading hint.

/// The candidate closest to `word`, if it is close enough to be a likely typo.
///
/// Comparison ignores ASCII case. An exact case-insensitive match wins outright.
///
/// ```
/// use cronq_shared::config::did_you_mean;
/// assert_eq!(did_you_mean("schedual", ["name", "schedule"]), Some("schedule"));
/// assert_eq!(did_you_mean("zzz", ["name", "schedule"]), None);
/// ```
pub fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let lower = word.to_ascii_lowercase();
    let mut best: Option<(f64, &'a str)> = None;
    for candidate in candidates {
        let cand = candidate.to_ascii_lowercase();
        if cand == lower {
            return Some(candidate);
        }
        let score = strsim::jaro_winkler(&lower, &cand);
        if best.is_none_or(|(s, _)| score > s) {
            best = Some((score, candidate));
        }
    }
    best.filter(|(score, _)| *score >= 0.85).map(|(_, c)| c)
}

/// The IANA zone names, for suggestions.
pub(crate) fn zone_names() -> impl Iterator<Item = &'static str> {
    chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name())
}

/// A zone whose name matches `word` ignoring case, or whose last component does
/// (`"shanghai"` → `"Asia/Shanghai"`), or that is a likely typo of it.
pub(crate) fn suggest_zone(word: &str) -> Option<&'static str> {
    let lower = word.to_ascii_lowercase();
    if let Some(exact) = zone_names().find(|n| n.to_ascii_lowercase() == lower) {
        return Some(exact);
    }
    if !lower.contains('/') && lower.len() >= 3 {
        let city = lower.replace(' ', "_");
        if let Some(by_city) = zone_names().find(|n| {
            n.rsplit('/')
                .next()
                .is_some_and(|last| last.to_ascii_lowercase() == city)
        }) {
            return Some(by_city);
        }
    }
    did_you_mean(word, zone_names())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_words_only() {
        assert_eq!(
            did_you_mean("timout", ["timeout", "retention"]),
            Some("timeout")
        );
        assert_eq!(did_you_mean("SKIP", ["allow", "skip"]), Some("skip"));
        assert_eq!(did_you_mean("payload2", ["name"]), None);
    }

    #[test]
    fn suggests_zones() {
        assert_eq!(suggest_zone("Asia/Shangai"), Some("Asia/Shanghai"));
        assert_eq!(suggest_zone("europe/berlin"), Some("Europe/Berlin"));
        assert_eq!(suggest_zone("Shanghai"), Some("Asia/Shanghai"));
        assert_eq!(suggest_zone("New York"), Some("America/New_York"));
        assert_eq!(suggest_zone("qqqqqqqqqqqq"), None);
    }
}
