//! The command `exactly effect` wraps, run as the send itself: in a process group led by a
//! forked [`Watchdog`], its stdout passed on to ours byte for byte as it is written (and kept, up
//! to [`RESPONSE_MAX`], as the effect's response), its stderr passed through. `SIGTERM`, `SIGHUP`
//! and `SIGINT` sent to us are forwarded to its group. The lease is the permission to send, and
//! it is enforced by a deadline, not by a read: the lease is re-read every [`LEASE_POLL`] on a
//! thread of its own, and at the deadline last heard (or a newer token holding the job) the group
//! is stopped — `SIGTERM`, then `SIGKILL` after [`STOP_GRACE`] — by us, and by the watchdog
//! even while we are paused. When the command ends, whatever it left running in its group (and, as
//! subreaper, outside it) is killed, so nothing sends after we record.
mod parent;
mod watchdog;

pub use watchdog::{Watchdog, WatchdogHealth};

use crate::store::Store;
use exactly_words::policy::{LEASE_POLL, STOP_GRACE};
use exactly_words::time::Ts;
use std::io::{Read, Write};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// Most bytes of a command's stdout kept as the effect's response (64 KiB); the rest still
/// reaches our stdout, and the row records how much there was.
pub const RESPONSE_MAX: usize = 64 * 1024;
/// How long we wait for the stdout pipe to drain once the command's group is gone.
const PIPE_WAIT: Duration = Duration::from_secs(2);

/// The lease a command runs under, re-read while it runs.
#[derive(Debug, Clone)]
pub struct LeaseWatch {
    /// Opens the watcher's own handle on the database holding the lease (the store the
    /// command was given: [`crate::Store::opener`]).
    pub db: crate::store::StoreOpener,
    /// The job whose lease it is.
    pub job: exactly_words::JobName,
    /// The fencing token the command sends under: a newer one stops it.
    pub token: exactly_words::Token,
    /// The effect whose `submitted` row carries this send's deadline (`sender_until`), moved on
    /// as the lease is renewed.
    pub effect: Option<SentRow>,
    /// The lease as the submit that won the send found it: its `lease_until` and when that is on
    /// our monotonic clock.
    pub granted: Option<(Ts, Instant)>,
}

/// The row a send is recorded on, for moving its deadline.
#[derive(Debug, Clone)]
pub struct SentRow {
    /// The effect key.
    pub key: String,
    /// The attempt id (`host:pid`) the row names.
    pub attempt: String,
}

/// What the command wrote on stdout: the first [`RESPONSE_MAX`] bytes and the total.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Output {
    /// The bytes kept: at most [`RESPONSE_MAX`].
    pub kept: Vec<u8>,
    /// How many bytes it wrote in all.
    pub total: u64,
}

impl Output {
    /// Whether it wrote more than was kept.
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
    /// Why the command was stopped, as a sentence for its record.
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
    /// Its exit status, or why it could not be waited for.
    pub status: std::io::Result<ExitStatus>,
    /// What it wrote on stdout.
    pub output: Output,
    /// Why we stopped it, if we did.
    pub stopped: Option<Stopped>,
    /// A signal we forwarded to the command, if any.
    pub forwarded: Option<i32>,
}

/// Why the command never started (nothing was sent).
#[derive(Debug)]
pub enum NotStarted {
    /// The process could not be started.
    Spawn(std::io::Error),
    /// The lease was gone (expired, or held by a newer token) before it could start.
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

/// What the lease reader tells the loop that stops the command.
enum Heard {
    /// The lease as read: its `lease_until` and when it ends on our monotonic clock (its time
    /// left measured on the database's clock, counted from before the read was sent).
    Until(String, Instant),
    Superseded(i64),
    Released,
}

/// Re-reads the lease every [`LEASE_POLL`] on a thread of its own, so a read that hangs (a
/// stalled server, a partition) delays no stop: the loop stops the command at the deadline it
/// last heard, whatever the reader is doing. A renewal moves the deadline only once the row's
/// `sender_until` says so too, so those who wait out the row never wait less than we send; the
/// row is read each time for the same reason (a deadline moved back there is ours too).
fn read_lease(
    spec: LeaseWatch,
    recorded: Option<Ts>,
    tx: mpsc::Sender<Heard>,
    done: Arc<AtomicBool>,
) {
    let mut store: Option<Store> = None;
    let mut recorded = recorded;
    while !done.load(Ordering::SeqCst) {
        let t0 = Instant::now();
        if store.is_none() {
            store = spec.db.open().ok();
        }
        if let Some(s) = store.as_mut() {
            let heard = match crate::lease::get_with_left(s, &spec.job) {
                Ok(Some((l, _))) if l.fencing_token != spec.token => {
                    Some(Heard::Superseded(l.fencing_token))
                }
                Ok(Some((l, left))) => match row_deadline(s, &spec, recorded) {
                    Ok(r) => {
                        recorded = r;
                        let until = deadline_now(s, &spec, l.lease_until, &mut recorded);
                        let cut = l.lease_until - until;
                        let left = (left - cut).to_std().unwrap_or(Duration::ZERO);
                        Some(Heard::Until(
                            exactly_words::time::fmt(until),
                            t0.checked_add(left).unwrap_or(t0),
                        ))
                    }
                    // The row's deadline is not a time: what those who wait out the row wait
                    // for cannot be known, so the command is cut at once (never the whole
                    // lease past a deadline nobody can read).
                    Err(crate::Error::Corrupt { message, .. }) => {
                        eprintln!(
                            "exactly: the send's deadline of job {} is not a time ({}): \
                             stopping the command",
                            exactly_words::sanitize::inert(&spec.job),
                            exactly_words::sanitize::inert_trunc(&message, 200)
                        );
                        Some(Heard::Until("a deadline that is not a time".into(), t0))
                    }
                    Err(_) => {
                        store = None;
                        None
                    }
                },
                // The lease row is gone: nothing grants the send any more.
                Ok(None) => Some(Heard::Released),
                Err(_) => {
                    store = None;
                    None
                }
            };
            if let Some(h) = heard {
                if tx.send(h).is_err() {
                    return;
                }
            }
        }
        let spent = t0.elapsed();
        std::thread::sleep(LEASE_POLL.saturating_sub(spent));
    }
}

/// The deadline the send's row carries (`sender_until`, read as a time at the store's door), or
/// `recorded` when there is no row or it carries none.
fn row_deadline(
    s: &mut Store,
    spec: &LeaseWatch,
    recorded: Option<Ts>,
) -> crate::Result<Option<Ts>> {
    let Some(e) = &spec.effect else {
        return Ok(recorded);
    };
    let row = s.effect(&exactly_words::EffectKey::from(e.key.as_str()))?;
    Ok(row.and_then(|r| r.sender_until).or(recorded))
}

/// The deadline the command is held to now: the lease's end, once the row carries it too
/// (moved on as the lease is renewed); else the deadline `recorded` on the row.
fn deadline_now(s: &mut Store, spec: &LeaseWatch, until: Ts, recorded: &mut Option<Ts>) -> Ts {
    let (Some(e), Some(r)) = (&spec.effect, *recorded) else {
        return until;
    };
    if until <= r {
        return until;
    }
    let at = exactly_words::time::fmt(until);
    match s.extend_sender(&e.key, &e.attempt, &spec.job, spec.token.get(), &at) {
        Ok(true) => {
            *recorded = Some(until);
            until
        }
        // Not recorded: the deadline stays the recorded one.
        _ => r,
    }
}

/// CLOCK_MONOTONIC in nanoseconds (a forked watchdog compares deadlines with it).
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// The watchdog's life, in the forked child: async-signal-safe calls only.
/// A pipe (read end, write end), closed on exec.
pub fn pipe() -> std::io::Result<(i32, i32)> {
    let mut fds = [0i32; 2];
    // SAFETY: fds has room for two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((fds[0], fds[1]))
}

/// The signals a watchdog leaves to its parent (the group's SIGTERM is for the command; a
/// terminal's are for the parent). Async-signal-safe: called in a forked child.
///
/// # Safety
/// Call it only in a process of its own (a forked child): it changes signal dispositions
/// for the whole process.
pub unsafe fn ignore_parents_signals() {
    // SAFETY: the caller is a process of its own (this function's # Safety); setting
    // a disposition to SIG_IGN is async-signal-safe.
    unsafe {
        for sig in PARENTS_SIGNALS {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
}

/// What [`ignore_parents_signals`] ignores (a process it starts gives them their defaults back).
pub const PARENTS_SIGNALS: [i32; 7] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGPIPE,
    libc::SIGTSTP,
    libc::SIGTTOU,
    libc::SIGTTIN,
];

/// Subtracted from a lease's end on our clock: the command is stopped this much before the lease
/// ends, so the stop (and its grace) falls inside what others wait out.
pub const DEADLINE_MARGIN: Duration = Duration::from_millis(100);

/// Runs `cmd` as described in the module's comment. `watch`: the lease to hold it to;
/// `watchdog`: the group it runs in (made before the row was submitted).
pub fn run(
    cmd: &mut Command,
    watch: Option<LeaseWatch>,
    watchdog: Option<&mut Watchdog>,
) -> Result<Ended, NotStarted> {
    // The deadline as granted: a first read that fails leaves it, never none.
    let mut deadline: Option<(String, Instant)> = watch
        .as_ref()
        .and_then(|w| w.granted)
        .map(|(u, ends)| (exactly_words::time::fmt(u), margin(ends)));
    if let Some((until, d)) = &deadline {
        if Instant::now() >= *d {
            return Err(NotStarted::LeaseGone(Stopped::LeaseExpired(until.clone())));
        }
    }
    let done = Arc::new(AtomicBool::new(false));
    let heard_rx = watch_lease(&watch, &mut deadline, &done)?;
    let mut watchdog = watchdog;
    if let Some(wd) = watchdog.as_mut() {
        wd.arm(deadline.as_ref().map(|d| d.1));
    }
    // Forwarded signals are caught from before the command starts until we exit: recording
    // its outcome is what we do after it ends, whatever stopped it.
    let caught = Arc::new(AtomicUsize::new(0));
    for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT] {
        // A registration that fails leaves that signal's default (we die, the command with us).
        let _ = signal_hook::flag::register_usize(sig, caught.clone(), sig as usize);
    }
    let (mut child, pgid, stdout) = start(cmd, &mut watchdog)?;
    let out = Arc::new(Mutex::new(Output::default()));
    let (done_tx, done_rx) = mpsc::channel::<()>();
    if let Some(stdout) = stdout {
        let out = out.clone();
        std::thread::spawn(move || {
            pass_on(stdout, &out);
            let _ = done_tx.send(());
        });
    } else {
        drop(done_tx);
    }
    let mut w = Waiting {
        pgid,
        deadline,
        stopped: None,
        term_at: None,
        forwarded: None,
    };
    let status = w.wait(child.as_mut(), &mut watchdog, &caught, &heard_rx);
    done.store(true, Ordering::SeqCst);
    let Waiting {
        deadline,
        mut stopped,
        forwarded,
        ..
    } = w;
    // The watchdog may have stopped it at the deadline a moment before we looked.
    if stopped.is_none() {
        if let Some((until, d)) = &deadline {
            if Instant::now() >= *d {
                stopped = Some(Stopped::LeaseExpired(until.clone()));
            }
        }
    }
    end_everything(pgid, &mut watchdog);
    let _ = done_rx.recv_timeout(PIPE_WAIT);
    let output = out.lock().map(|o| o.clone()).unwrap_or_default();
    Ok(Ended {
        status,
        output,
        stopped,
        forwarded,
    })
}

/// A lease's end on our clock, less [`DEADLINE_MARGIN`].
fn margin(i: Instant) -> Instant {
    i.checked_sub(DEADLINE_MARGIN).unwrap_or(i)
}

/// Starts the thread that reads the lease (when there is one to hold the command to), and,
/// with nothing granted, waits for its first read: the permission to send is the lease as
/// first read.
fn watch_lease(
    watch: &Option<LeaseWatch>,
    deadline: &mut Option<(String, Instant)>,
    done: &Arc<AtomicBool>,
) -> Result<mpsc::Receiver<Heard>, NotStarted> {
    let (heard_tx, heard_rx) = mpsc::channel::<Heard>();
    if let Some(w) = watch.clone() {
        let recorded = w.granted.map(|g| g.0);
        let done = done.clone();
        std::thread::spawn(move || read_lease(w, recorded, heard_tx, done));
        // With nothing granted, the permission to send is the lease as first read.
        if deadline.is_none() {
            match heard_rx.recv_timeout(LEASE_POLL * 10) {
                Ok(Heard::Until(u, ends)) => *deadline = Some((u, margin(ends))),
                Ok(Heard::Superseded(t)) => {
                    return Err(NotStarted::LeaseGone(Stopped::Superseded(t)))
                }
                Ok(Heard::Released) => {
                    return Err(NotStarted::LeaseGone(Stopped::LeaseExpired(
                        crate::lease::RELEASED.to_string(),
                    )))
                }
                Err(_) => {
                    return Err(NotStarted::LeaseGone(Stopped::LeaseExpired(
                        "an unknown time (the lease could not be read)".into(),
                    )))
                }
            }
        }
    } else {
        drop(heard_tx);
    }
    Ok(heard_rx)
}

/// The command's stdout, as a thread reads it.
type Stdout = Option<Box<dyn Read + Send>>;

/// Starts the command in its group (and cage): where no cgroup could be made the watchdog
/// starts it, as its parent and subreaper; otherwise we do, in the watchdog's group and the
/// cage. Returns our child (if it is ours), its group and its stdout.
fn start(
    cmd: &mut Command,
    watchdog: &mut Option<&mut Watchdog>,
) -> Result<(Option<std::process::Child>, i32, Stdout), NotStarted> {
    in_group(cmd, watchdog.as_ref().map(|w| w.pgid))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(wd) = watchdog.as_ref() {
        wd.cage().hold(cmd);
    }
    let mut child: Option<std::process::Child> = None;
    let (pgid, stdout): (i32, Stdout) = match watchdog.as_mut() {
        Some(wd) if wd.held.is_some() => {
            wd.start_command(cmd).map_err(NotStarted::Spawn)?;
            let out = wd.held.as_mut().and_then(|h| h.out.take());
            (wd.pgid, out.map(|o| Box::new(o) as Box<dyn Read + Send>))
        }
        _ => {
            let mut c = cmd.spawn().map_err(NotStarted::Spawn)?;
            let pgid = watchdog.as_ref().map(|w| w.pgid).unwrap_or(c.id() as i32);
            let out = c.stdout.take().map(|o| Box::new(o) as Box<dyn Read + Send>);
            child = Some(c);
            (pgid, out)
        }
    };
    Ok((child, pgid, stdout))
}

/// The command while it runs: its group, the deadline it is held to, and what we did to it.
struct Waiting {
    pgid: i32,
    deadline: Option<(String, Instant)>,
    stopped: Option<Stopped>,
    term_at: Option<Instant>,
    forwarded: Option<i32>,
}

impl Waiting {
    /// Waits for the command's end, forwarding the signals caught, following the lease, and
    /// stopping the command when the lease is lost or its deadline passes.
    fn wait(
        &mut self,
        mut child: Option<&mut std::process::Child>,
        watchdog: &mut Option<&mut Watchdog>,
        caught: &AtomicUsize,
        heard_rx: &mpsc::Receiver<Heard>,
    ) -> std::io::Result<ExitStatus> {
        let mut looked_at_watchdog = Instant::now();
        loop {
            let ended = match (child.as_mut(), watchdog.as_mut()) {
                (Some(c), _) => c.try_wait(),
                (None, Some(wd)) => wd.try_status(),
                (None, None) => Err(std::io::Error::other("no command was started")),
            };
            match ended {
                Ok(Some(s)) => break Ok(s),
                Ok(None) => {}
                Err(e) => break Err(e),
            }
            let sig = caught.swap(0, Ordering::SeqCst);
            if sig != 0 {
                signal_group(self.pgid, sig as i32);
                self.forwarded = Some(sig as i32);
            }
            while let Ok(h) = heard_rx.try_recv() {
                self.heard(h, watchdog);
            }
            if self.stopped.is_none() {
                if let Some((until, d)) = &self.deadline {
                    if Instant::now() >= *d {
                        let until = until.clone();
                        self.stop(Stopped::LeaseExpired(until));
                    }
                }
            }
            if self.term_at.is_some_and(|t| t.elapsed() >= STOP_GRACE) {
                match watchdog.as_ref() {
                    Some(wd) => wd.kill_now(),
                    None => signal_group(self.pgid, libc::SIGKILL),
                }
            }
            if looked_at_watchdog.elapsed() >= WATCHDOG_LOOK {
                looked_at_watchdog = Instant::now();
                if let Some(wd) = watchdog.as_mut() {
                    look_at(wd);
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// What the lease reader heard: a new end (the watchdog re-armed), or the lease lost.
    fn heard(&mut self, h: Heard, watchdog: &mut Option<&mut Watchdog>) {
        let stop = match h {
            Heard::Until(u, ends) => {
                let d = margin(ends);
                if let Some(wd) = watchdog.as_mut() {
                    if self.deadline.as_ref().is_none_or(|(_, old)| *old != d) {
                        wd.arm(Some(d));
                    }
                }
                self.deadline = Some((u, d));
                None
            }
            Heard::Superseded(t) => Some(Stopped::Superseded(t)),
            Heard::Released => Some(Stopped::LeaseExpired(crate::lease::RELEASED.to_string())),
        };
        if self.stopped.is_none() {
            if let Some(s) = stop {
                self.stop(s);
            }
        }
    }

    /// SIGTERMs the command's group, once, and says why.
    fn stop(&mut self, why: Stopped) {
        signal_group(self.pgid, libc::SIGTERM);
        self.term_at = Some(Instant::now());
        self.stopped = Some(why);
    }
}

/// Nothing the command started may go on sending after we record its outcome: its group,
/// its cage (what left the group), and what was re-parented to us.
fn end_everything(pgid: i32, watchdog: &mut Option<&mut Watchdog>) {
    signal_group(pgid, libc::SIGKILL);
    if let Some(wd) = watchdog.as_mut() {
        wd.end_descendants();
    }
    if let Some(wd) = watchdog.as_ref() {
        if !wd.end_all() {
            eprintln!(
                "exactly: something the command started could not be ended within {}s \
                 (another user's process?): a retry will judge this send by its deadline",
                exactly_words::contain::END_WAIT.as_secs()
            );
        }
    }
    end_orphans();
}

/// How often the sender looks at its watchdog: well inside the stop margin, so a dead one is
/// replaced before a deadline it should have kept.
const WATCHDOG_LOOK: Duration = Duration::from_millis(100);

/// Looks at the watchdog and says what changed: a stopped one (we enforce the deadline alone
/// meanwhile), a dead one restarted.
fn look_at(wd: &mut Watchdog) {
    let was_stopped = wd.stopped;
    match wd.check() {
        WatchdogHealth::Stopped if !was_stopped => eprintln!(
            "exactly: the watchdog (pid {}) is stopped: the deadline is enforced by this \
             process alone until it runs again",
            wd.pid
        ),
        WatchdogHealth::Restarted(None) => eprintln!(
            "exactly: the watchdog died: restarted it (pid {}) with the same deadline",
            wd.pid
        ),
        WatchdogHealth::Restarted(Some(why)) => eprintln!(
            "exactly: the watchdog died and cannot be restarted ({why}): the deadline is \
             enforced by this process alone"
        ),
        _ => {}
    }
}

/// Makes this process the child subreaper of what its commands start (`exactly effect` does):
/// a grandchild that leaves the command's group (setsid) is re-parented to us, not to init, and
/// [`run`] ends it with the command.
pub fn become_subreaper() {
    // SAFETY: prctl with these arguments changes only this process's reaper flag.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    SUBREAPER.store(true, Ordering::SeqCst);
}

static SUBREAPER: AtomicBool = AtomicBool::new(false);

/// As subreaper, ends every process re-parented to us (a command's orphans that left its group)
/// and reaps it.
fn end_orphans() {
    if !SUBREAPER.load(Ordering::SeqCst) {
        return;
    }
    let me = std::process::id().to_string();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return;
    };
    for pid in dir
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
    {
        let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(rest) = s.rfind(')').map(|i| &s[i + 1..]) else {
            continue;
        };
        if rest.split_whitespace().nth(1) == Some(me.as_str()) {
            // SAFETY: pid is our child (re-parented to us); we reap what we kill.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG);
            }
        }
    }
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

/// The command runs in the watchdog's process group (or one of its own), so it and everything it
/// starts can be signalled as one, and dies with us: if we are killed mid-effect, it must not go
/// on to send after a restart has already observed "not happened" and sent again.
pub fn in_group(cmd: &mut Command, pgid: Option<i32>) -> &mut Command {
    use std::os::unix::process::CommandExt;
    let pgid = pgid.unwrap_or(0);
    // SAFETY: setpgid and prctl are async-signal-safe and touch no memory of the parent.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setpgid(0, pgid) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd
}
