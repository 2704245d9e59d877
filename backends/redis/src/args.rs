//! Turning Rust values into Lua script arguments, shared by every script of this crate.

use std::time::Duration;

/// Milliseconds of a duration, at least 1, for Redis `PX`-style arguments (0 would mean
/// "no expiry" to some commands and an error to others).
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}
