//! The command `exactly effect` wraps, run as the send itself: in its own process group, its
//! stdout passed on to ours byte for byte as it is written (and kept, up to [`RESPONSE_MAX`], as
//! the effect's response), its stderr passed through. `SIGTERM`, `SIGHUP` and `SIGINT` sent to us
//! are forwarded to its group. The lease is the permission to send: the lease the command runs
//! under is re-read every [`LEASE_POLL`]; once it has expired by our clock (or a newer token holds
//! the job) the group is stopped — `SIGTERM`, then `SIGKILL` after [`STOP_GRACE`]. When the command
//! ends, whatever it left running in its group is killed, so nothing sends after we record.
use crate::Store;
use std::io::{Read, Write};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// Most bytes of a command's stdout kept as the effect's response (64 KiB); the rest still
/// reaches our stdout, and the row records how much there was.
pub const RESPONSE_MAX: usize = 64 * 1024;
/// How often the lease is re-read while the command runs.
pub const LEASE_POLL: Duration = Duration::from_millis(200);
/// How long a stopped command has between `SIGTERM` and `SIGKILL`.
pub const STOP_GRACE: Duration = Duration::from_millis(500);
/// How long we wait for the stdout pipe to drain once the command's group is gone.
const PIPE_WAIT: Duration = Duration::from_secs(2);

/// The lease a command runs under, re-read while it runs.
#[derive(Debug, Clone)]
pub struct LeaseWatch {
    pub db: String,
    pub job: String,
    pub token: i64,
}

/// What the command wrote on stdout: the first [`RESPONSE_MAX`] bytes and the total.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Output {
    pub kept: Vec<u8>,
    pub total: u64,
}

impl Output {
    pub fn cut(&self) -> bool {
        self.total > self.kept.len() as u64
    }
}

/// Why we stopped the command ourselves.
#[derive(Debug, Clone, PartialEq)]
pub enum Stopped {
    /// The lease expired without renewal (by our clock) at this instant.
    LeaseExpired(String),
    /// A newer fencing token holds the job.
    Superseded(i64),
}

impl Stopped {
    pub fn words(&self) -> String {
        match self {
            Stopped::LeaseExpired(at) => {
                format!("its lease expired at {at} without renewal, so the command was stopped")
            }
            Stopped::Superseded(t) => {
                format!("token {t} took the job's lease over, so the command was stopped")
            }
        }
    }
}

/// How the command ended.
#[derive(Debug)]
pub struct Ended {
    pub status: std::io::Result<ExitStatus>,
    pub output: Output,
    pub stopped: Option<Stopped>,
    /// A signal we forwarded to the command, if any.
    pub forwarded: Option<i32>,
}

/// Why the command never started (nothing was sent).
#[derive(Debug)]
pub enum NotStarted {
    Spawn(std::io::Error),
    LeaseGone(Stopped),
}

fn signal_group(pgid: i32, sig: i32) {
    if pgid > 0 {
        // SAFETY: kill has no memory-safety preconditions; a negative pid names a process group.
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
}

/// Reads the lease and says whether the command may go on sending under it.
struct Watch {
    spec: LeaseWatch,
    store: Option<Store>,
    /// `lease_until` as last read, and when it ends on our monotonic clock (its time left
    /// measured on the database's clock: on PostgreSQL the server's, whatever ours says).
    until: Option<(String, Instant)>,
    next: Instant,
}

impl Watch {
    fn new(spec: LeaseWatch) -> Watch {
        Watch {
            spec,
            store: None,
            until: None,
            next: Instant::now(),
        }
    }

    /// Re-reads the lease (when due) and judges it. A database we cannot read is no reason to
    /// stop, but also no renewal: the last `lease_until` read still bounds the send.
    fn check(&mut self, force: bool) -> Option<Stopped> {
        if force || Instant::now() >= self.next {
            self.next = Instant::now() + LEASE_POLL;
            if self.store.is_none() {
                self.store = crate::open(Some(&self.spec.db), crate::Access::Write).ok();
            }
            if let Some(store) = self.store.as_mut() {
                match crate::lease::get_with_left(store, &self.spec.job) {
                    Ok(Some((l, _))) if l.fencing_token != self.spec.token => {
                        return Some(Stopped::Superseded(l.fencing_token));
                    }
                    Ok(Some((l, left))) => {
                        self.until = Some((l.lease_until, crate::lease::ends_at(left)));
                    }
                    // The lease row is gone: nothing grants the send any more.
                    Ok(None) => {
                        self.until = Some((crate::lease::RELEASED.to_string(), Instant::now()));
                    }
                    Err(_) => {}
                }
            }
        }
        match &self.until {
            Some((until, ends)) if Instant::now() >= *ends => {
                Some(Stopped::LeaseExpired(until.clone()))
            }
            _ => None,
        }
    }
}

/// Runs `cmd` as described in the module's comment. `watch`: the lease to hold it to.
pub fn run(cmd: &mut Command, watch: Option<LeaseWatch>) -> Result<Ended, NotStarted> {
    let mut watch = watch.map(Watch::new);
    // The permission to send is checked before anything can leave.
    if let Some(stop) = watch.as_mut().and_then(|w| w.check(true)) {
        return Err(NotStarted::LeaseGone(stop));
    }
    // Forwarded signals are caught from before the command starts until we exit: recording
    // its outcome is what we do after it ends, whatever stopped it.
    let caught = Arc::new(AtomicUsize::new(0));
    for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT] {
        // A registration that fails leaves that signal's default (we die, the command with us).
        let _ = signal_hook::flag::register_usize(sig, caught.clone(), sig as usize);
    }
    in_own_group(cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = cmd.spawn().map_err(NotStarted::Spawn)?;
    let pgid = child.id() as i32;
    let out = Arc::new(Mutex::new(Output::default()));
    let (done_tx, done_rx) = mpsc::channel::<()>();
    if let Some(stdout) = child.stdout.take() {
        let out = out.clone();
        std::thread::spawn(move || {
            pass_on(stdout, &out);
            let _ = done_tx.send(());
        });
    } else {
        drop(done_tx);
    }
    let mut stopped: Option<Stopped> = None;
    let mut term_at: Option<Instant> = None;
    let mut forwarded = None;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Ok(s),
            Ok(None) => {}
            Err(e) => break Err(e),
        }
        let sig = caught.swap(0, Ordering::SeqCst);
        if sig != 0 {
            signal_group(pgid, sig as i32);
            forwarded = Some(sig as i32);
        }
        if stopped.is_none() {
            if let Some(stop) = watch.as_mut().and_then(|w| w.check(false)) {
                signal_group(pgid, libc::SIGTERM);
                term_at = Some(Instant::now());
                stopped = Some(stop);
            }
        }
        if term_at.is_some_and(|t| t.elapsed() >= STOP_GRACE) {
            signal_group(pgid, libc::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    // Nothing the command started may go on sending after we record its outcome.
    signal_group(pgid, libc::SIGKILL);
    let _ = done_rx.recv_timeout(PIPE_WAIT);
    let output = out.lock().map(|o| o.clone()).unwrap_or_default();
    Ok(Ended {
        status,
        output,
        stopped,
        forwarded,
    })
}

/// Copies the command's stdout to ours as it arrives (unaltered, flushed per read) and keeps
/// the head. If our stdout is closed the copy stops but the capture goes on, so the command
/// never blocks on a full pipe.
fn pass_on(mut from: impl Read, out: &Mutex<Output>) {
    let mut buf = [0u8; 8192];
    let mut to = Some(std::io::stdout());
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        if let Some(w) = to.as_mut() {
            let mut lock = w.lock();
            if lock
                .write_all(&buf[..n])
                .and_then(|_| lock.flush())
                .is_err()
            {
                to = None;
            }
        }
        if let Ok(mut o) = out.lock() {
            let room = RESPONSE_MAX.saturating_sub(o.kept.len()).min(n);
            o.kept.extend_from_slice(&buf[..room]);
            o.total += n as u64;
        }
    }
}

/// The command gets a process group of its own (so it and everything it starts can be signalled
/// as one) and dies with us: if we are killed mid-effect, it must not go on to send after a
/// restart has already observed "not happened" and sent again.
fn in_own_group(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: setpgid and prctl are async-signal-safe and touch no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setpgid(0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd
}
