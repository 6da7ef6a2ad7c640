//! One run of one firing: settle the job's open effects, start the command with the firing in
//! its environment, renew the lease by heartbeat while it runs, capture a bounded log, record
//! the outcome and release the lease.
use crate::store::{RunEnd, Started, Store};
use crate::{effect, lease, time, Result};
use std::collections::VecDeque;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes of a run's output kept from its start, and from its end.
const LOG_HEAD: usize = 16 * 1024;
const LOG_TAIL: usize = 48 * 1024;
/// After SIGTERM to a command killed at shutdown, how long before SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// How long to wait for output pipes after the command exits (a background grandchild may
/// keep them open forever).
const PIPE_WAIT: Duration = Duration::from_millis(500);

/// Everything a run needs; it opens its own database connection.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub db: String,
    pub job: String,
    pub started: Started,
    pub lease: Duration,
    pub command: Vec<String>,
    pub cwd: Option<PathBuf>,
    /// Set at shutdown once the grace period is over: kill the command.
    pub kill: Arc<AtomicBool>,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    pub outcome: String,
    pub exit_code: Option<i32>,
    pub duration_ms: i64,
}

/// The command's stdout and stderr, interleaved as they arrive, bounded: the head and the
/// tail are kept, the middle counted.
#[derive(Default)]
struct LogBuf {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    dropped: u64,
    /// Bytes received in all (so a flush can tell whether anything is new).
    seen: u64,
}

/// How often a running command's output so far is stored for `exactly logs --follow`.
const OUTPUT_FLUSH: Duration = Duration::from_secs(1);

/// Stores the output so far when it grew since `flushed` bytes.
fn flush_output(store: &mut Store, run_id: &str, log: &Mutex<LogBuf>, flushed: &mut u64) {
    let Some((seen, text)) = log
        .lock()
        .ok()
        .filter(|l| l.seen != *flushed)
        .map(|l| (l.seen, l.render()))
    else {
        return;
    };
    // Best effort: a busy database delays the follower, never the run.
    if store.run_output_so_far(run_id, &text).is_ok() {
        *flushed = seen;
    }
}

impl LogBuf {
    fn push(&mut self, bytes: &[u8]) {
        self.seen += bytes.len() as u64;
        let room = LOG_HEAD.saturating_sub(self.head.len());
        let (h, rest) = bytes.split_at(room.min(bytes.len()));
        self.head.extend_from_slice(h);
        for &b in rest {
            if self.tail.len() == LOG_TAIL {
                self.tail.pop_front();
                self.dropped += 1;
            }
            self.tail.push_back(b);
        }
    }
    fn render(&self) -> String {
        let mut out = String::from_utf8_lossy(&self.head).into_owned();
        if self.dropped > 0 {
            out.push_str(&format!("\n[… {} bytes not kept …]\n", self.dropped));
        }
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        out.push_str(&String::from_utf8_lossy(&tail));
        out
    }
}

fn pump(
    mut from: impl Read + Send + 'static,
    log: Arc<Mutex<LogBuf>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if let Ok(mut l) = log.lock() {
                        l.push(&buf[..n]);
                    }
                }
            }
        }
    })
}

/// Sends `sig` to the command's process group (it leads its own, so the scheduler's terminal
/// signals do not reach it and our kill reaches its children too).
fn signal_group(pid: u32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions; a negative pid names a process group.
    unsafe {
        libc::kill(-(pid as i32), sig);
    }
}

/// Runs one firing to its end. Errors are the database's; the command's failures are outcomes.
pub fn execute(spec: &RunSpec) -> Result<RunResult> {
    let mut store = Store::open(&spec.db)?;
    let job = spec.job.as_str();
    let token = spec.started.token;
    let run_id = spec.started.run_id.as_str();
    let slot = spec.started.slot.as_str();
    // Unknown before retry: the job's open effects get their observers' verdicts first.
    match effect::settle_open(&mut store, job) {
        Ok(v) if !v.is_empty() => {
            log_line(
                "INFO",
                job,
                &format!(
                    "observers settled {} open effect(s) before run {run_id}",
                    v.len()
                ),
            );
            // An effect that never happened goes out with a re-run of the firing that meant it
            // (its key is of the facts, so that firing's done effects are suppressed).
            for s in v
                .iter()
                .filter(|s| s.verdict == effect::Observation::NotHappened)
            {
                if let Err(e) = store.retry_firing_of_run(job, &s.run_id) {
                    log_line(
                        "WARN",
                        job,
                        &format!("cannot mark run {} for retry: {e}", s.run_id),
                    );
                }
            }
        }
        Ok(_) => {}
        Err(e) => log_line("WARN", job, &format!("observers could not run: {e}")),
    }
    let began = Instant::now();
    let log = Arc::new(Mutex::new(LogBuf::default()));
    let (prog, args) = match spec.command.split_first() {
        Some(x) => x,
        None => return finish(&mut store, spec, "failed", None, began, "no command"),
    };
    let exe = std::env::current_exe()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "exactly".into());
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .env("EXACTLY_DB", &spec.db)
        .env("EXACTLY_JOB", job)
        .env("EXACTLY_FENCING_TOKEN", token.to_string())
        .env("EXACTLY_RUN_ID", run_id)
        .env("EXACTLY_SCHEDULED_AT", slot)
        .env("EXACTLY_BIN", exe)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(dir) = &spec.cwd {
        cmd.current_dir(dir);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let why = format!("cannot start {prog:?}: {e}");
            log_line("ERROR", job, &format!("run {run_id}: {why}"));
            return finish(&mut store, spec, "failed", None, began, &why);
        }
    };
    let pid = child.id();
    let mut pumps = Vec::new();
    if let Some(out) = child.stdout.take() {
        pumps.push(pump(out, log.clone()));
    }
    if let Some(err) = child.stderr.take() {
        pumps.push(pump(err, log.clone()));
    }
    let beat = (spec.lease / 3).max(Duration::from_millis(50));
    let mut next_beat = Instant::now() + beat;
    let mut fenced = false;
    let mut killed_at: Option<Instant> = None;
    let (mut next_flush, mut flushed) = (Instant::now() + OUTPUT_FLUSH, 0u64);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) => {}
            Err(e) => {
                log_line("WARN", job, &format!("run {run_id}: lost the command: {e}"));
                break None;
            }
        }
        if spec.kill.load(Ordering::SeqCst) {
            match killed_at {
                None => {
                    signal_group(pid, libc::SIGTERM);
                    killed_at = Some(Instant::now());
                }
                Some(t) if t.elapsed() > KILL_GRACE => signal_group(pid, libc::SIGKILL),
                Some(_) => {}
            }
        }
        if Instant::now() >= next_flush {
            next_flush = Instant::now() + OUTPUT_FLUSH;
            flush_output(&mut store, run_id, &log, &mut flushed);
        }
        if !fenced && Instant::now() >= next_beat {
            next_beat = Instant::now() + beat;
            match lease::renew(&mut store, job, token, spec.lease) {
                Ok(true) => {}
                Ok(false) => {
                    // Stop renewing; the token now refuses the command's later writes.
                    fenced = true;
                    log_line(
                        "WARN",
                        job,
                        &format!("run {run_id} fenced: a newer token holds the lease; its writes will be refused"),
                    );
                    if let Err(e) = store.run_fenced(job, run_id, token) {
                        log_line("WARN", job, &format!("cannot record the fenced run: {e}"));
                    }
                }
                // A busy database is not a fence: try again at the next beat.
                Err(e) => log_line("WARN", job, &format!("lease renewal failed: {e}")),
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let deadline = Instant::now() + PIPE_WAIT;
    while pumps.iter().any(|p| !p.is_finished()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let text = log.lock().map(|l| l.render()).unwrap_or_default();
    let code = status.and_then(|s| s.code());
    let outcome = if fenced {
        "fenced"
    } else if killed_at.is_some() {
        "killed"
    } else if code == Some(0) {
        "ok"
    } else {
        "failed"
    };
    if let (Some(s), "failed") = (status, outcome) {
        if let Some(sig) = s.signal() {
            log_line("WARN", job, &format!("run {run_id} ended by signal {sig}"));
        }
    }
    finish(&mut store, spec, outcome, code, began, &text)
}

fn finish(
    store: &mut Store,
    spec: &RunSpec,
    outcome: &str,
    exit_code: Option<i32>,
    began: Instant,
    log: &str,
) -> Result<RunResult> {
    let duration_ms = began.elapsed().as_millis() as i64;
    let outcome = store.finish_run(&RunEnd {
        job: &spec.job,
        run_id: &spec.started.run_id,
        slot: &spec.started.slot,
        token: spec.started.token,
        outcome,
        exit_code,
        duration_ms,
        log,
    })?;
    let level = if outcome == "ok" { "INFO" } else { "WARN" };
    log_line(
        level,
        &spec.job,
        &format!(
            "run {} {outcome} in {}{}",
            spec.started.run_id,
            time::human_ms(duration_ms as u64),
            exit_code
                .map(|c| format!(" (exit {c})"))
                .unwrap_or_default()
        ),
    );
    Ok(RunResult {
        outcome,
        exit_code,
        duration_ms,
    })
}

/// One log line on stderr: `LEVEL job=NAME message`, with what came from outside made inert.
pub fn log_line(level: &str, job: &str, msg: &str) {
    eprintln!(
        "{} {level} job={} {}",
        time::now_text(),
        crate::sanitize::inert(job),
        crate::sanitize::inert(msg)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_keeps_head_and_tail() {
        let mut l = LogBuf::default();
        l.push(&vec![b'a'; LOG_HEAD]);
        l.push(&vec![b'b'; LOG_TAIL + 10]);
        l.push(b"end");
        let r = l.render();
        assert!(r.starts_with("aaa"));
        assert!(r.ends_with("bend"));
        assert!(r.contains("13 bytes not kept"));
    }
}
