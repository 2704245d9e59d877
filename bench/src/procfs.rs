//! What the kernel says about a process: resident memory and CPU time, from `/proc`.
//!
//! Owns: parsing `/proc/PID/status` and `/proc/PID/stat`. Linux only, like the benchmark
//! machine; a missing field is an error that names the file.

use std::time::Duration;

use anyhow::{Context as _, anyhow};

/// `/proc/PID/stat` counts CPU time in `USER_HZ` ticks, which Linux fixes at 100 for
/// user space whatever the kernel's internal `HZ` (see proc(5)).
const USER_HZ: f64 = 100.0;

/// Resident memory of a process.
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    /// `VmRSS`: resident now, in bytes.
    pub rss: u64,
    /// `VmHWM`: the peak resident size, in bytes.
    pub peak: u64,
}

/// `pid`'s resident memory; `None` for the bench process itself.
///
/// # Errors
/// When the process is gone or the file lacks the fields.
pub fn memory(pid: Option<u32>) -> anyhow::Result<Memory> {
    let path = proc_path(pid, "status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("while reading {path}"))?;
    let field = |name: &str| -> anyhow::Result<u64> {
        let line = text
            .lines()
            .find(|l| l.starts_with(name))
            .ok_or_else(|| anyhow!("{path}: no {name} line"))?;
        let kib: u64 = line
            .trim_start_matches(name)
            .trim_start_matches(':')
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .with_context(|| format!("{path}: unreadable {name} line {line:?}"))?;
        Ok(kib * 1024)
    };
    Ok(Memory {
        rss: field("VmRSS")?,
        peak: field("VmHWM")?,
    })
}

/// User plus system CPU time `pid` used so far, all threads; `None` for the bench process.
///
/// # Errors
/// When the process is gone or the file is unreadable.
pub fn cpu_time(pid: Option<u32>) -> anyhow::Result<Duration> {
    stat_ticks(pid, 11)
}

/// User plus system CPU time of the children `pid` has waited for so far (`cutime` and
/// `cstime`: the commands a consumer ran); `None` for the bench process.
///
/// # Errors
/// When the process is gone or the file is unreadable.
pub fn children_cpu_time(pid: Option<u32>) -> anyhow::Result<Duration> {
    stat_ticks(pid, 13)
}

/// The sum of the two tick fields of `/proc/PID/stat` at `first` and `first + 1`,
/// counted after the command name's closing paren.
fn stat_ticks(pid: Option<u32>, first: usize) -> anyhow::Result<Duration> {
    let path = proc_path(pid, "stat");
    let text = std::fs::read_to_string(&path).with_context(|| format!("while reading {path}"))?;
    // The command name (field 2) may hold spaces: count fields after its closing paren.
    let rest = text
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| anyhow!("{path}: no command name"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ")": field 3 (state) is index 0, so utime (14) is 11 and stime (15) is 12,
    // cutime (16) is 13 and cstime (17) is 14.
    let tick = |i: usize| -> anyhow::Result<f64> {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .ok_or_else(|| anyhow!("{path}: unreadable CPU time field"))
    };
    Ok(Duration::from_secs_f64(
        (tick(first)? + tick(first + 1)?) / USER_HZ,
    ))
}

fn proc_path(pid: Option<u32>, file: &str) -> String {
    match pid {
        Some(pid) => format!("/proc/{pid}/{file}"),
        None => format!("/proc/self/{file}"),
    }
}

/// The machine, for the report: CPU count, memory and CPU model.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Machine {
    /// Logical CPUs available to the bench.
    pub cpus: usize,
    /// `MemTotal`, bytes.
    pub memory: u64,
    /// The first `model name` of `/proc/cpuinfo`.
    pub cpu_model: String,
    /// `uname -r`-like kernel release.
    pub kernel: String,
}

impl Machine {
    /// Reads the machine description; unknown parts are `"unknown"` / 0.
    pub fn describe() -> Self {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory = meminfo
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kib| kib.parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024);
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map_or_else(|| "unknown".to_owned(), |(_, m)| m.trim().to_owned());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map_or_else(|_| "unknown".to_owned(), |k| k.trim().to_owned());
        Self {
            cpus: std::thread::available_parallelism().map_or(0, usize::from),
            memory,
            cpu_model,
            kernel,
        }
    }
}

/// The lowest pid of a process whose command name (`/proc/PID/comm`) is `comm`,
/// if there is one on this machine (a local RabbitMQ is `beam.smp`, Redis `redis-server`).
pub fn find(comm: &str) -> Option<u32> {
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim_end() == comm)
        })
        .collect();
    pids.sort_unstable();
    pids.first().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_memory_and_cpu() {
        let mem = memory(None).unwrap();
        assert!(mem.rss > 0 && mem.peak >= mem.rss);
        cpu_time(None).unwrap();
        children_cpu_time(None).unwrap();
    }

    #[test]
    fn finds_a_process_by_command_name() {
        let own = std::fs::read_to_string("/proc/self/comm").unwrap();
        let found = find(own.trim_end()).expect("this very process runs");
        assert!(found <= std::process::id(), "the lowest pid of that name");
        assert_eq!(find("no-such-command"), None);
    }
}
