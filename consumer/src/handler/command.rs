//! The `command` handler: argv executed without a shell, in its own process group.
//!
//! Environment: the consumer's (none with `clear_env`), then the job's `env`, then
//! `CRONQ_JOB`, `CRONQ_KEY`, `CRONQ_SCHEDULED_AT` (RFC 3339 in the job's zone),
//! `CRONQ_ATTEMPT`, `CRONQ_FENCE` (the attempt's fencing token), and `TRACEPARENT` when the
//! occurrence is traced (the consumer's own `TRACEPARENT` and `TRACESTATE` are never passed
//! on: they name another trace); with `user`, also `USER`, `LOGNAME` and `HOME` of that user (unless
//! `env` sets them). It runs as `user`/`group` ([`super::identity`]) in `cwd`. The payload
//! JSON reaches it on stdin only, never on its command line; exit 0 is success. On cancellation the whole
//! process group gets SIGTERM, then SIGKILL after the caller's grace, so grandchildren
//! (`sh -c 'sleep 100'`) die too. The last [`TAIL_BYTES`] of stderr (or of stdout when
//! stderr is empty) are the attempt's error; the last `limit` bytes of each are its
//! output ([`Capture`]), the values of the job's `env` masked.

use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use cronq_shared::config::CommandHandler;
use cronq_shared::message::Occurrence;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Child;
use tokio_util::sync::CancellationToken;

use cronq_shared::runlog::RunOutput;

use super::{Capture, identity};

/// How much of stderr (or stdout) makes the error of a failed attempt.
pub(crate) const TAIL_BYTES: usize = 4096;

/// How long to wait for the pipes to close after SIGKILL (a grandchild that left the group
/// could hold them open forever).
const AFTER_KILL: Duration = Duration::from_secs(5);

/// Kills the process group on drop unless disarmed: an attempt aborted mid-run leaves no
/// processes behind.
struct GroupGuard(Option<Pid>);

impl GroupGuard {
    fn signal(&self, sig: Signal) {
        if let Some(pgid) = self.0 {
            // ESRCH (the group is gone) is the expected outcome once it exited.
            let _ = killpg(pgid, sig);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.signal(Signal::SIGKILL);
    }
}

/// The last bytes a stream gave, and whether it gave more.
#[derive(Debug, Default)]
struct Tail {
    kept: Vec<u8>,
    cut: bool,
}

impl Tail {
    /// The last `n` bytes.
    fn last(&self, n: usize) -> &[u8] {
        &self.kept[self.kept.len().saturating_sub(n)..]
    }
}

/// Reads `reader` to its end, keeping its last `keep` bytes.
async fn tail(reader: Option<impl AsyncRead + Unpin>, keep: usize) -> Tail {
    let mut tail = Tail::default();
    let Some(mut reader) = reader else {
        return tail;
    };
    let mut buf = [0u8; 4096];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                tail.kept.extend_from_slice(&buf[..n]);
                // Drained in chunks, not at every read: amortised, at most twice `keep` held.
                if tail.kept.len() > keep.saturating_mul(2).max(2 * TAIL_BYTES) {
                    tail.kept.drain(..tail.kept.len() - keep);
                    tail.cut = true;
                }
            }
        }
    }
    if tail.kept.len() > keep {
        tail.kept.drain(..tail.kept.len() - keep);
        tail.cut = true;
    }
    tail
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_owned()
}

/// Runs `argv` for `occ` until it exits or `token` is cancelled; once cancelled, the
/// process group gets SIGTERM, then SIGKILL after `grace`.
pub(crate) async fn run(
    handler: &CommandHandler,
    occ: &Occurrence,
    fence: u64,
    grace: Duration,
    token: CancellationToken,
    capture: &Capture,
) -> Result<(), String> {
    let program = handler
        .argv
        .first()
        .ok_or_else(|| "the command is empty".to_owned())?;
    let (mut child, guard) = spawn(handler, occ, fence)?;
    let payload = serde_json::to_vec(&occ.payload).unwrap_or_default();
    let stdin = child.stdin.take();
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let io = async {
        let write = async move {
            if let Some(mut stdin) = stdin {
                // A command that does not read its stdin closes the pipe: not an error.
                let _ = stdin.write_all(&payload).await;
            }
        };
        let keep = capture.limit().max(TAIL_BYTES);
        let ((), out, err, status) =
            tokio::join!(write, tail(stdout, keep), tail(stderr, keep), child.wait());
        (out, err, status)
    };
    let mut io = std::pin::pin!(io);
    let finished = tokio::select! {
        r = &mut io => Some(r),
        () = token.cancelled() => None,
    };
    let (out, err, status) = match finished {
        Some(r) => r,
        None => {
            guard.signal(Signal::SIGTERM);
            match tokio::time::timeout(grace, &mut io).await {
                Ok(r) => r,
                Err(_) => {
                    guard.signal(Signal::SIGKILL);
                    tokio::time::timeout(AFTER_KILL, &mut io)
                        .await
                        .map_err(|_| format!("{program:?} did not exit after SIGKILL"))?
                }
            }
        }
    };
    if !out.kept.is_empty() {
        tracing::debug!(job = %occ.job, key = %occ.key, stdout = %text(out.last(TAIL_BYTES)), "command output");
    }
    let limit = capture.limit();
    capture.keep(
        RunOutput {
            stdout: String::from_utf8_lossy(out.last(limit)).into_owned(),
            stderr: String::from_utf8_lossy(err.last(limit)).into_owned(),
            truncated: out.kept.len() > limit || err.kept.len() > limit || out.cut || err.cut,
            ..RunOutput::default()
        },
        handler.env.iter().map(|(_, value)| value.as_str()),
    );
    let status = status.map_err(|e| format!("cannot wait for {program:?}: {e}"))?;
    drop(guard); // also reaps any process the command left behind in its group
    outcome(program, status, out.last(TAIL_BYTES), err.last(TAIL_BYTES))
}

/// Starts the command for `occ` in its own process group, as its user in its directory,
/// with the occurrence in its environment and piped stdio.
fn spawn(
    handler: &CommandHandler,
    occ: &Occurrence,
    fence: u64,
) -> Result<(Child, GroupGuard), String> {
    let (program, args) = handler
        .argv
        .split_first()
        .ok_or_else(|| "the command is empty".to_owned())?;
    let identity = identity::resolve(handler).map_err(|(field, problem)| {
        format!("cannot start {program:?}: the job's {field}: {problem}")
    })?;
    let mut cmd = tokio::process::Command::new(program);
    if handler.clear_env {
        cmd.env_clear();
    }
    if let Some((name, home)) = &identity.account {
        cmd.env("USER", name).env("LOGNAME", name).env("HOME", home);
    }
    if let Some(uid) = identity.uid {
        // As root, std also drops the supplementary groups before it takes the uid.
        cmd.uid(uid.as_raw());
    }
    if let Some(gid) = identity.gid {
        cmd.gid(gid.as_raw());
    }
    if let Some(cwd) = &handler.cwd {
        if !cwd.is_dir() {
            return Err(format!(
                "cannot start {program:?}: the job's cwd {} is not a directory",
                cwd.display()
            ));
        }
        cmd.current_dir(cwd);
    }
    cmd.env_remove("TRACEPARENT").env_remove("TRACESTATE");
    cmd.args(args)
        .envs(handler.env.iter().map(|(k, v)| (k, v)))
        .env("CRONQ_JOB", occ.job.as_str())
        .env("CRONQ_KEY", occ.key.to_string())
        .env("CRONQ_SCHEDULED_AT", occ.scheduled_local.to_rfc3339())
        .env("CRONQ_ATTEMPT", occ.attempt.to_string())
        .env("CRONQ_FENCE", fence.to_string());
    if let Some(traceparent) = &occ.traceparent {
        cmd.env("TRACEPARENT", traceparent);
    }
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so a timeout can signal every process it started.
        .process_group(0)
        .kill_on_drop(true);
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {program:?}: {e}: check the job's command"))?;
    let guard = GroupGuard(
        child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw),
    );
    Ok((child, guard))
}

/// The attempt's result from the command's exit status and output tails.
fn outcome(program: &str, status: ExitStatus, out: &[u8], err: &[u8]) -> Result<(), String> {
    if status.success() {
        return Ok(());
    }
    // The stderr tail is the error; a command that reports on stdout only gets that tail.
    let tail = Some(text(err))
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| text(out));
    Err(if tail.is_empty() {
        format!("{program:?} {status}")
    } else {
        format!("{program:?} {status}: {tail}")
    })
}
