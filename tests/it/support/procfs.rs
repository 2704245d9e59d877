//! What the kernel says of a process the tests started (Linux's /proc).

/// The field `field` (with its colon, e.g. `VmRSS:`) of /proc/PID/FILE, given in kB there,
/// in bytes. Panics naming the file when the process is gone or the field is missing.
pub fn kb_field(pid: u32, file: &str, field: &str) -> u64 {
    let path = format!("/proc/{pid}/{file}");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e} (did the process die?)"));
    let kb: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {path}"));
    kb * 1024
}
