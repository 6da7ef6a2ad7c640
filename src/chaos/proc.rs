//! Child processes the harness starts and kills: `exactly effect` attempts (or, unguarded, the
//! bare client) with their stderr read on a thread so a kill can wait for a marker line.
use crate::{Error, Result};
use std::ffi::CString;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::OnceLock;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a kill waits for its marker before calling the attempt stuck.
const MARKER_WAIT: Duration = Duration::from_secs(30);

/// Environment the harness never passes on by accident.
const SCRUB: &[&str] = &[
    "EXACTLY_FAULT",
    "EXACTLY_JOB",
    "EXACTLY_FENCING_TOKEN",
    "EXACTLY_RUN_ID",
    "EXACTLY_DB",
    "EXACTLY_EFFECT_KEY",
    super::far_side::CLIENT_FAULT_ENV,
];

/// `--no-cgroup`: the mount points every child is started under read-only (set once).
static NO_CGROUP: OnceLock<Vec<CString>> = OnceLock::new();

/// The cgroup filesystems mounted here (and the tmpfs holding v1's), from /proc/mounts.
pub(super) fn cgroup_mounts() -> Result<Vec<String>> {
    let text = std::fs::read_to_string("/proc/mounts")
        .map_err(|e| Error::io(format!("cannot read /proc/mounts: {e}"), e))?;
    let mut v: Vec<String> = text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (at, kind) = (*f.get(1)?, *f.get(2)?);
            (kind.contains("cgroup") || at.starts_with("/sys/fs/cgroup")).then(|| at.to_string())
        })
        .collect();
    v.sort();
    v.dedup();
    Ok(v)
}

/// From now on every child starts in a mount namespace of its own where `mounts` are
/// read-only: a sender that cannot make a cgroup must fall back, and the run shows how it does.
pub(super) fn no_cgroup(mounts: &[String]) -> Result<()> {
    let m: Vec<CString> = mounts
        .iter()
        .map(|p| CString::new(p.as_bytes()))
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| Error::Usage(format!("a mount point holds a NUL byte: {e}")))?;
    let _ = NO_CGROUP.set(m);
    Ok(())
}

/// Sets up `--no-cgroup`'s namespace in the child before it execs (its pid stays the one we
/// signal, its stdio and environment as set).
fn contain(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    let Some(mounts) = NO_CGROUP.get() else {
        return;
    };
    let mounts = mounts.clone();
    // SAFETY: unshare and mount are async-signal-safe system calls; the closure allocates
    // nothing (the paths were made before the fork).
    unsafe {
        cmd.pre_exec(move || {
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // Private, so the read-only remounts stay in this namespace.
            let root = c"/";
            let none = std::ptr::null();
            let flags = libc::MS_REC | libc::MS_PRIVATE;
            if libc::mount(none, root.as_ptr(), none, flags, std::ptr::null()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            for m in &mounts {
                let flags = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY;
                if libc::mount(none, m.as_ptr(), none, flags, std::ptr::null()) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// Under `--no-cgroup`: fails unless a child cannot write to any cgroup mount (checked with
/// `touch` and `mkdir`, as a sender making its cgroup would write).
pub(super) fn check_no_cgroup(mounts: &[String]) -> Result<()> {
    let mut c = Command::new("sh");
    c.args([
        "-c",
        "for d; do [ -d \"$d\" ] || continue; \
         if touch \"$d/cgroup.procs\" 2>/dev/null || mkdir \"$d/exactly-chaos-probe\" 2>/dev/null; \
         then rmdir \"$d/exactly-chaos-probe\" 2>/dev/null; echo \"$d\"; exit 1; fi; done",
        "sh",
    ])
    .args(mounts)
    .stdin(Stdio::null())
    .stderr(Stdio::null())
    .stdout(Stdio::piped());
    contain(&mut c);
    let out = c
        .output()
        .map_err(|e| Error::io(format!("--no-cgroup: cannot start the check: {e}"), e))?;
    if out.status.success() {
        return Ok(());
    }
    Err(Error::Environment(format!(
        "--no-cgroup: {} is still writable inside the namespace",
        crate::sanitize::inert(String::from_utf8_lossy(&out.stdout).trim())
    )))
}

pub(super) fn command(exe: &std::path::Path) -> Command {
    let mut c = Command::new(exe);
    for v in SCRUB {
        c.env_remove(v);
    }
    c.stdin(Stdio::null()).stdout(Stdio::null());
    c
}

/// A running child whose stderr lines arrive on a channel.
pub(crate) struct Running {
    child: Child,
    lines: Receiver<String>,
    reader: Option<JoinHandle<Vec<String>>>,
    seen: Vec<String>,
    pub killed: bool,
}

/// How a child ended.
#[derive(Debug, Clone)]
pub(crate) struct Ended {
    /// Exit code; None when a signal ended it.
    pub code: Option<i32>,
    pub stderr: String,
}

impl Ended {
    /// The last stderr line, for failure messages.
    pub(crate) fn last_words(&self) -> String {
        crate::sanitize::inert_trunc(self.stderr.lines().last().unwrap_or(""), 200)
    }
}

impl Running {
    pub(crate) fn spawn(mut cmd: Command) -> Result<Running> {
        cmd.stderr(Stdio::piped());
        contain(&mut cmd);
        let mut child = cmd
            .spawn()
            .map_err(|e| Error::io(format!("cannot start an attempt: {e}"), e))?;
        let (tx, rx) = mpsc::channel();
        let reader = child.stderr.take().map(|err| {
            std::thread::spawn(move || {
                let mut all = Vec::new();
                for line in BufReader::new(err).lines() {
                    let Ok(line) = line else { break };
                    let _ = tx.send(line.clone());
                    all.push(line);
                }
                all
            })
        });
        Ok(Running {
            child,
            lines: rx,
            reader,
            seen: Vec::new(),
            killed: false,
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for a stderr line containing `marker`; false when the child ended first.
    pub(crate) fn wait_marker(&mut self, marker: &str) -> Result<bool> {
        let deadline = Instant::now() + MARKER_WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    let hit = l.contains(marker);
                    self.seen.push(l);
                    if hit {
                        return Ok(true);
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return Ok(false),
                Err(RecvTimeoutError::Timeout) => {
                    self.kill();
                    return Err(Error::Store(format!(
                        "an attempt never reached {marker:?} within {MARKER_WAIT:?}"
                    )));
                }
            }
        }
    }

    /// Waits for a stderr line containing `marker` and returns it; None when the child ended
    /// first.
    pub(crate) fn wait_line(&mut self, marker: &str) -> Result<Option<String>> {
        if self.wait_marker(marker)? {
            return Ok(self.seen.last().cloned());
        }
        Ok(None)
    }

    /// SIGKILL, if it is still running; true when the signal was sent to a live child.
    pub(crate) fn kill(&mut self) -> bool {
        if matches!(self.child.try_wait(), Ok(None)) {
            // SAFETY: signalling our own unreaped child; its pid cannot have been reused.
            let rc = unsafe { libc::kill(self.child.id() as i32, libc::SIGKILL) };
            if rc == 0 {
                self.killed = true;
            }
        }
        self.killed
    }

    /// SIGTERM: the polite stop a deploy sends.
    pub(crate) fn term(&mut self) -> bool {
        if matches!(self.child.try_wait(), Ok(None)) {
            // SAFETY: as in `kill`.
            return unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) } == 0;
        }
        false
    }

    pub(crate) fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Reaps the child without waiting for its stderr to close: what it left running may hold
    /// the pipe open, and the harness must not wait for that before it retries.
    pub(crate) fn reap(&mut self) -> Result<()> {
        self.child.wait()?;
        Ok(())
    }

    /// Reaps the child (so a dead attempt is seen as dead) and collects its stderr.
    pub(crate) fn finish(mut self) -> Result<Ended> {
        let status = self.child.wait()?;
        let mut lines = match self.reader.take() {
            Some(h) => h.join().unwrap_or_default(),
            None => Vec::new(),
        };
        if lines.is_empty() {
            lines = std::mem::take(&mut self.seen);
        }
        Ok(Ended {
            code: status.code(),
            stderr: lines.join("\n"),
        })
    }

    /// Waits at most `d` for the child to end by itself.
    pub(crate) fn wait_for(&mut self, d: Duration) -> bool {
        let deadline = Instant::now() + d;
        while Instant::now() < deadline {
            if !self.running() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        !self.running()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // An attempt abandoned by an error must not linger and send later.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Sleeps until `ms` after `since`: a scenario's steps keep their places on one timeline.
pub(super) fn until(since: Instant, ms: u64) {
    std::thread::sleep(Duration::from_millis(ms).saturating_sub(since.elapsed()));
}
