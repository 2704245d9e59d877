//! One `cronq standalone` child process under measurement: started on a config and a
//! data location, its `/metrics` counters and CPU time read while it runs, the log lines
//! the bench asked for kept, then stopped.
//!
//! Owns: the child's command line, its admin address and its stderr. Invariant: stderr is
//! read from start to exit, so a chatty child never blocks on a full pipe.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::Child;
use tokio::task::JoinHandle;

/// Where the standalone keeps its state: `--data`.
#[derive(Debug, Clone)]
pub enum Data {
    /// One SQLite file (WAL), created fresh for each measurement.
    File(PathBuf),
    /// `--data :memory:`, the baseline.
    Memory,
}

impl Data {
    /// The value of `--data`.
    fn flag(&self) -> String {
        match self {
            Self::File(path) => path.display().to_string(),
            Self::Memory => ":memory:".to_owned(),
        }
    }

    /// How a figure or a progress line names it.
    pub fn label(&self) -> &'static str {
        match self {
            Self::File(_) => "SQLite",
            Self::Memory => "memory",
        }
    }

    /// Deletes the SQLite file and its WAL and shared-memory files, if any.
    pub fn remove(&self) {
        if let Self::File(path) = self {
            for suffix in ["", "-wal", "-shm", "-journal"] {
                let mut name = path.clone().into_os_string();
                name.push(suffix);
                let _ = std::fs::remove_file(name);
            }
        }
    }
}

/// How to start one standalone.
#[derive(Debug)]
pub struct Launch<'a> {
    /// The `cronq` binary.
    pub cronq: &'a Path,
    /// The config file.
    pub config: &'a Path,
    /// `--data`.
    pub data: &'a Data,
    /// `--concurrency`.
    pub concurrency: u16,
    /// `--data-sync`, when the bench was given one (else cronq's default).
    pub sync: Option<&'a str>,
    /// `RUST_LOG` of the child.
    pub log: &'a str,
    /// Keep the log lines that contain this text (others are dropped as they arrive).
    pub keep: Option<&'static str>,
}

/// Counters read from `/metrics`, summed over every job.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counters {
    /// `cronq_attempts_total{outcome="succeeded"}`.
    pub succeeded: f64,
    /// `cronq_occurrences_published_total`.
    pub published: f64,
}

/// What the stderr reader keeps.
#[derive(Debug, Default)]
struct Log {
    first: Option<String>,
    kept: Vec<String>,
    tail: VecDeque<String>,
}

/// Lines of stderr kept for an error message.
const TAIL: usize = 20;

/// A running `cronq standalone`.
#[derive(Debug)]
pub struct Standalone {
    child: Child,
    pid: u32,
    admin: SocketAddr,
    log: Arc<Mutex<Log>>,
    reader: JoinHandle<()>,
}

impl Standalone {
    /// Starts `cronq --log-format json standalone` as `launch` says, with its admin
    /// endpoints on a free local port.
    ///
    /// # Errors
    /// When the binary cannot be started or no local port is free.
    pub fn start(launch: &Launch<'_>) -> anyhow::Result<Self> {
        // Ask the kernel for a free port, then hand it to the child: a race only with
        // another process binding in between, which shows as the child failing to start.
        let admin = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .context("while finding a free local port for the admin endpoints")?;
        let mut command = tokio::process::Command::new(launch.cronq);
        command
            .args(["--log-format", "json", "standalone", "--config"])
            .arg(launch.config)
            .args(["--data", &launch.data.flag()])
            .args(["--concurrency", &launch.concurrency.to_string()])
            .args(["--admin-addr", &admin.to_string(), "--grace", "2s"]);
        if let Some(sync) = launch.sync {
            command.args(["--data-sync", sync]);
        }
        let mut child = command
            .env("RUST_LOG", launch.log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| {
                format!(
                    "while starting {} (build it with `cargo build --release`)",
                    launch.cronq.display()
                )
            })?;
        let pid = child.id().context("the standalone exited at once")?;
        let stderr = child.stderr.take().context("no stderr pipe")?;
        let log = Arc::new(Mutex::new(Log::default()));
        let reader = {
            let (log, keep) = (Arc::clone(&log), launch.keep);
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
                    if keep.is_some_and(|k| line.contains(k)) {
                        log.kept.push(line);
                        continue;
                    }
                    if log.first.is_none() {
                        log.first = Some(line.clone());
                    }
                    if log.tail.len() == TAIL {
                        log.tail.pop_front();
                    }
                    log.tail.push_back(line);
                }
            })
        };
        Ok(Self {
            child,
            pid,
            admin,
            log,
            reader,
        })
    }

    fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The first log line that was not a kept one (`standalone: data file …`).
    pub fn first_line(&self) -> Option<String> {
        self.log().first.clone()
    }

    /// Takes the kept lines so far.
    pub fn take_kept(&self) -> Vec<String> {
        std::mem::take(&mut self.log().kept)
    }

    /// How many kept lines are waiting.
    pub fn kept_len(&self) -> usize {
        self.log().kept.len()
    }

    /// Fails, with the end of its log, when the child has exited.
    ///
    /// # Errors
    /// When it has.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "`cronq standalone` exited with {status}:\n{}",
                Vec::from(self.log().tail.clone()).join("\n")
            );
        }
        Ok(())
    }

    /// CPU time of the standalone so far (not its commands' processes).
    ///
    /// # Errors
    /// When `/proc` cannot be read.
    pub fn cpu_time(&self) -> anyhow::Result<Duration> {
        crate::procfs::cpu_time(Some(self.pid))
    }

    /// CPU time of the commands it ran (its children, once reaped).
    ///
    /// # Errors
    /// When `/proc` cannot be read.
    pub fn children_cpu_time(&self) -> anyhow::Result<Duration> {
        crate::procfs::children_cpu_time(Some(self.pid))
    }

    /// Reads `/metrics`.
    ///
    /// # Errors
    /// When the admin endpoint does not answer 200.
    pub async fn counters(&self) -> anyhow::Result<Counters> {
        let text = get(self.admin, "/metrics").await?;
        Ok(Counters {
            succeeded: sum(&text, "cronq_attempts_total", Some("outcome=\"succeeded\"")),
            published: sum(&text, "cronq_occurrences_published_total", None),
        })
    }

    /// SIGTERM (SIGKILL after 10 s), then waits for its log to end.
    pub async fn stop(mut self) {
        crate::scale::stop(&mut self.child).await;
        let _ = self.reader.await;
    }
}

/// One HTTP/1.1 GET on a fresh connection; the body when the status is 200.
async fn get(addr: SocketAddr, path: &str) -> anyhow::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("while connecting to the admin endpoints on {addr}"))?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    let text = String::from_utf8(raw).context("the admin endpoint answered non-UTF-8")?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .context("the admin endpoint answered no HTTP header")?;
    let status = head.lines().next().unwrap_or_default();
    if !status.starts_with("HTTP/1.1 200") {
        bail!("GET {path} on {addr} answered {status:?}");
    }
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        bail!("GET {path} on {addr} answered a chunked body, which this reader does not decode");
    }
    Ok(body.to_owned())
}

/// The sum of every sample of counter `name` (Prometheus text), over the lines holding
/// `label` when one is given.
fn sum(text: &str, name: &str, label: Option<&str>) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(['{', ' ']))
        })
        .filter(|l| label.is_none_or(|label| l.contains(label)))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_a_counter_over_its_jobs() {
        let text = "# TYPE cronq_attempts_total counter\n\
            cronq_attempts_total{job=\"s0\",outcome=\"succeeded\"} 3\n\
            cronq_attempts_total{job=\"s1\",outcome=\"succeeded\"} 4\n\
            cronq_attempts_total{job=\"s1\",outcome=\"failed\"} 9\n\
            cronq_attempts_total_other 100\n\
            cronq_occurrences_published_total{job=\"s0\"} 5\n";
        let ok = Some("outcome=\"succeeded\"");
        assert_eq!(sum(text, "cronq_attempts_total", ok), 7.0);
        assert_eq!(sum(text, "cronq_attempts_total", None), 16.0);
        assert_eq!(sum(text, "cronq_occurrences_published_total", None), 5.0);
    }

    #[test]
    fn data_flags() {
        assert_eq!(Data::Memory.flag(), ":memory:");
        let file = Data::File(PathBuf::from("/tmp/x/bench.db"));
        assert_eq!(file.flag(), "/tmp/x/bench.db");
        assert_eq!(file.label(), "SQLite");
    }
}
