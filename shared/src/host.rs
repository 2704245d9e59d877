//! This machine's host name, as every process names itself: in the fleet registry, in a
//! consumer's default id, in a producer's instance id and in the audit log's `user@host`.
//!
//! Invariant: one answer per machine, read one way: the kernel's name, else
//! `/etc/hostname`, else `HOSTNAME`, else `unknown`; never empty, never with whitespace.

/// This machine's host name.
pub fn name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::env::var("HOSTNAME")
                .ok()
                .filter(|h| !h.trim().is_empty())
        })
        .map_or_else(
            || "unknown".to_owned(),
            |h| h.trim().replace(char::is_whitespace, "-"),
        )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_host_name_is_one_word() {
        let name = super::name();
        assert!(!name.is_empty());
        assert!(!name.contains(char::is_whitespace), "{name:?}");
        assert_eq!(super::name(), name, "read the same way each time");
    }
}
