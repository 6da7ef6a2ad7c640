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

use crate::contain::{Cage, Killer};

use crate::policy::{LEASE_POLL, STOP_GRACE};
use crate::Store;
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
    /// The database holding the lease.
    pub db: String,
    /// The job whose lease it is.
    pub job: crate::JobName,
    /// The fencing token the command sends under: a newer one stops it.
    pub token: crate::Token,
    /// The effect whose `submitted` row carries this send's deadline (`sender_until`), moved on
    /// as the lease is renewed.
    pub effect: Option<SentRow>,
    /// The lease as the submit that won the send found it: its `lease_until` and when that is on
    /// our monotonic clock.
    pub granted: Option<(String, Instant)>,
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
/// `sender_until` says so too, so those who wait out the row never wait less than we send.
fn read_lease(
    spec: LeaseWatch,
    recorded: Option<String>,
    tx: mpsc::Sender<Heard>,
    done: Arc<AtomicBool>,
) {
    let mut store: Option<Store> = None;
    let mut recorded = recorded;
    while !done.load(Ordering::SeqCst) {
        let t0 = Instant::now();
        if store.is_none() {
            store = crate::open(Some(&spec.db), crate::Access::Write).ok();
        }
        if let Some(s) = store.as_mut() {
            let heard = match crate::lease::get_with_left(s, &spec.job) {
                Ok(Some((l, _))) if l.fencing_token != spec.token => {
                    Some(Heard::Superseded(l.fencing_token))
                }
                Ok(Some((l, left))) => {
                    let mut until = l.lease_until.clone();
                    if let Some(e) = &spec.effect {
                        if recorded.as_deref().is_some_and(|r| until.as_str() > r) {
                            match s.extend_sender(
                                &e.key,
                                &e.attempt,
                                &spec.job,
                                spec.token.get(),
                                &until,
                            ) {
                                Ok(true) => recorded = Some(until.clone()),
                                // Not recorded: the deadline stays the recorded one.
                                _ => until = recorded.clone().unwrap_or(until),
                            }
                        }
                    }
                    let cut = match (
                        crate::time::parse(&l.lease_until),
                        crate::time::parse(&until),
                    ) {
                        (Some(a), Some(b)) => a - b,
                        _ => chrono::Duration::zero(),
                    };
                    let left = (left - cut).to_std().unwrap_or(Duration::ZERO);
                    Some(Heard::Until(until, t0.checked_add(left).unwrap_or(t0)))
                }
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

/// A small process forked before the row is submitted: it leads the process group the command
/// will run in (so the row can name the group before anything is sent), holds the command's
/// [`Cage`] (a cgroup of its own, or a cookie), and stops both at the deadline it was last given
/// — even while we are paused (SIGSTOP) or hung — and at once when we die, so nothing the
/// command started (`timeout` and `setsid` leave the group, not the cage) can send after a retry
/// has judged us gone. We watch it in turn: a dead one is restarted, a stopped one said.
pub struct Watchdog {
    /// The command's process group: the first watchdog's pid.
    pgid: i32,
    /// The first watchdog's start time (how the row names the group).
    start: u64,
    /// The watchdog process now (a restarted one joins the same group).
    pid: i32,
    tx: Option<std::fs::File>,
    cage: Cage,
    killer: Killer,
    /// The deadline last armed (monotonic ns), given again to a restarted watchdog.
    armed: u64,
    /// Whether it was last seen stopped (said once per stop).
    stopped: bool,
    /// Where no cgroup could be made, the watchdog starts the command itself (see
    /// [`parent`]): the command's stdout and the watchdog's answers.
    held: Option<Held>,
}

/// The watchdog as the command's parent: what `exactly effect` keeps of it.
struct Held {
    /// The command's stdout (read end), taken when it starts.
    out: Option<std::fs::File>,
    /// The watchdog's answers (`P`, `E`, `X`, `K`), read without blocking.
    back: std::fs::File,
    /// The command it started: pid and start time.
    cmd: Option<(i32, u64)>,
}

/// What [`Watchdog::check`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchdogHealth {
    /// Running.
    Running,
    /// Stopped (SIGSTOP): the deadline is enforced by the sender alone until it runs again.
    Stopped,
    /// It had died and was restarted (or could not be: the `String` says why).
    Restarted(Option<String>),
}

impl Watchdog {
    /// Forks the watchdog: a process that leads the command's group, holds its cage and stops
    /// both at the deadline.
    pub fn start() -> std::io::Result<Watchdog> {
        use std::os::fd::FromRawFd;
        let cage = Cage::new("sender");
        let killer = Killer::new(&cage);
        // No cgroup: the watchdog becomes the command's parent and subreaper.
        let (pid, tx, held) = if cage.containment() == crate::contain::Containment::Cookie {
            let (out_r, out_w) = pipe()?;
            let (back_r, back_w) = pipe()?;
            let mut server = parent::Server::new(out_w, back_w);
            let forked = fork_watchdog(0, &killer, Some(&mut server));
            // SAFETY: the watchdog has its copies of the write ends; these are ours.
            unsafe {
                libc::close(out_w);
                libc::close(back_w);
                libc::fcntl(back_r, libc::F_SETFL, libc::O_NONBLOCK);
            }
            // SAFETY: both read ends are open descriptors we own from here on.
            let (out, back) = unsafe {
                (
                    std::fs::File::from_raw_fd(out_r),
                    std::fs::File::from_raw_fd(back_r),
                )
            };
            let (pid, tx) = forked?;
            let held = Held {
                out: Some(out),
                back,
                cmd: None,
            };
            (pid, tx, Some(held))
        } else {
            let (pid, tx) = fork_watchdog(0, &killer, None)?;
            (pid, tx, None)
        };
        let start = crate::sender::stat(pid).map(|s| s.start).unwrap_or(0);
        Ok(Watchdog {
            pgid: pid,
            start,
            pid,
            tx: Some(tx),
            cage,
            killer,
            armed: u64::MAX,
            stopped: false,
            held,
        })
    }

    /// Where no cgroup could be made: has the watchdog start `cmd` as its child (see
    /// [`parent`]); its pid, or why it could not start.
    fn start_command(&mut self, cmd: &Command) -> std::io::Result<i32> {
        let msg = parent::encode(cmd);
        if msg.len() > parent::MAX_PAYLOAD {
            return Err(std::io::Error::from_raw_os_error(libc::E2BIG));
        }
        let mut framed = Vec::with_capacity(msg.len() + 5);
        framed.push(b'S');
        framed.extend_from_slice(&(msg.len() as u32).to_le_bytes());
        framed.extend_from_slice(&msg);
        let tx = self
            .tx
            .as_mut()
            .ok_or_else(|| std::io::Error::other("the watchdog is gone"))?;
        tx.write_all(&framed)?;
        let until = Instant::now() + START_WAIT;
        loop {
            match self.heard()? {
                Some((b'P', pid)) => {
                    let start = crate::sender::stat(pid).map_or(0, |s| s.start);
                    if let Some(h) = self.held.as_mut() {
                        h.cmd = Some((pid, start));
                    }
                    return Ok(pid);
                }
                Some((b'E', e)) => return Err(std::io::Error::from_raw_os_error(e)),
                Some(_) => {}
                None if Instant::now() >= until => {
                    return Err(std::io::Error::other(
                        "the watchdog did not start the command in time",
                    ))
                }
                None => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    }

    /// One answer of the watchdog as its parent, if one has come: (tag, value). An error when
    /// it is gone.
    fn heard(&mut self) -> std::io::Result<Option<(u8, i32)>> {
        let Some(h) = self.held.as_mut() else {
            return Ok(None);
        };
        let mut m = [0u8; 5];
        match h.back.read(&mut m) {
            Ok(5) => Ok(Some((m[0], i32::from_le_bytes([m[1], m[2], m[3], m[4]])))),
            Ok(0) => Err(std::io::Error::other(
                "the watchdog died, and the command with it",
            )),
            Ok(_) => Err(std::io::Error::other("a short answer from the watchdog")),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The command's wait status once the watchdog (its parent) has reaped it.
    fn try_status(&mut self) -> std::io::Result<Option<ExitStatus>> {
        use std::os::unix::process::ExitStatusExt;
        loop {
            match self.heard()? {
                Some((b'X', status)) => return Ok(Some(ExitStatus::from_raw(status))),
                Some(_) => {}
                None => break,
            }
        }
        // A stopped watchdog cannot reap it: the kernel keeps a zombie's status in its stat.
        let cmd = self.held.as_ref().and_then(|h| h.cmd);
        Ok(cmd.and_then(|(pid, start)| {
            crate::sender::stat(pid)
                .filter(|s| s.zombie && (start == 0 || s.start == start))
                .map(|s| ExitStatus::from_raw(s.exit_code))
        }))
    }

    /// Has the watchdog end every descendant of the command (re-parented to it) now, and waits
    /// up to [`crate::contain::END_WAIT`] for it to say so.
    fn end_descendants(&mut self) {
        if self.held.is_none() {
            return;
        }
        if let Some(tx) = self.tx.as_mut() {
            if tx.write_all(b"K").is_err() {
                return;
            }
        }
        let until = Instant::now() + crate::contain::END_WAIT;
        while Instant::now() < until {
            match self.heard() {
                Ok(Some((b'K', _))) | Err(_) => return,
                _ => std::thread::sleep(Duration::from_millis(2)),
            }
        }
    }

    /// The group the command runs in.
    pub fn group(&self) -> crate::sender::Group {
        crate::sender::Group {
            pgid: self.pgid,
            leader_start: self.start,
        }
    }

    /// The cage the command runs in.
    pub fn cage(&self) -> &Cage {
        &self.cage
    }

    /// Stop the group at `deadline` (None: no deadline).
    pub(crate) fn arm(&mut self, deadline: Option<Instant>) {
        let ns = match deadline {
            Some(d) => mono_ns()
                .saturating_add(d.saturating_duration_since(Instant::now()).as_nanos() as u64),
            None => u64::MAX,
        };
        self.armed = ns;
        if let Some(tx) = self.tx.as_mut() {
            // A watchdog that is gone cannot be armed; our own loop still stops at the deadline,
            // and `check` restarts it.
            let _ = tx.write_all(&deadline_message(ns));
        }
    }

    /// Looks at the watchdog: a dead one is restarted in the same group and re-armed; a stopped
    /// one is reported once (the sender's own loop enforces the deadline meanwhile).
    pub fn check(&mut self) -> WatchdogHealth {
        match crate::sender::stat(self.pid) {
            Some(s) if s.state == 'T' || s.state == 't' => {
                self.stopped = true;
                WatchdogHealth::Stopped
            }
            Some(s) if !s.zombie => {
                self.stopped = false;
                WatchdogHealth::Running
            }
            // Dead (a zombie of ours, or gone): the group lives on in the zombie until reaped,
            // so the new one can join it.
            _ => {
                let restarted = match fork_watchdog(self.pgid, &self.killer, None) {
                    Ok((pid, tx)) => {
                        let old = std::mem::replace(&mut self.pid, pid);
                        self.tx = Some(tx);
                        // SAFETY: the old watchdog is our child; reaping it leaves no zombie.
                        unsafe { libc::waitpid(old, std::ptr::null_mut(), libc::WNOHANG) };
                        let ns = self.armed;
                        if let Some(tx) = self.tx.as_mut() {
                            let _ = tx.write_all(&deadline_message(ns));
                        }
                        None
                    }
                    Err(e) => {
                        self.tx = None;
                        Some(e.to_string())
                    }
                };
                WatchdogHealth::Restarted(restarted)
            }
        }
    }

    /// Ends what is left in the command's group and cage: true when nothing is.
    pub(crate) fn end_all(&self) -> bool {
        signal_group(self.pgid, libc::SIGKILL);
        self.cage.end()
    }

    /// SIGKILLs the group and every process in the cage once (a stop's last step).
    fn kill_now(&self) {
        signal_group(self.pgid, libc::SIGKILL);
        self.killer.kill_all();
    }
}

/// How long the watchdog may take to start a command it was asked to.
const START_WAIT: Duration = Duration::from_secs(10);

/// The message that arms the watchdog until `ns` on the monotonic clock.
fn deadline_message(ns: u64) -> [u8; 9] {
    let mut m = [0u8; 9];
    m[0] = b'D';
    m[1..].copy_from_slice(&ns.to_le_bytes());
    m
}

/// Forks a watchdog that joins group `pgid` (0: leads a group of its own) and ends `killer`'s
/// cage with it: its pid and the pipe that arms it. With `server` it is the command's parent.
fn fork_watchdog(
    pgid: i32,
    killer: &Killer,
    server: Option<&mut parent::Server>,
) -> std::io::Result<(i32, std::fs::File)> {
    let (r, w) = pipe()?;
    let grace = STOP_GRACE.as_nanos() as u64;
    let (fds, v1, needle) = killer.raw_parts();
    // SAFETY: the child runs only async-signal-safe libc calls (no allocation, no locks) on
    // memory prepared before the fork, and never returns: `watchdog_main` ends in `_exit`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let e = std::io::Error::last_os_error();
        // SAFETY: both descriptors are ours.
        unsafe {
            libc::close(r);
            libc::close(w);
        }
        return Err(e);
    }
    if pid == 0 {
        // SAFETY: in the forked child; see above.
        unsafe {
            let given = Given {
                r,
                w,
                grace_ns: grace,
                pgid,
                cage_fds: fds,
                v1,
                needle,
            };
            watchdog_main(given, server)
        }
    }
    // SAFETY: r is ours; the child has its copy. setpgid here too closes the race with the
    // child's own call: the group exists before we record it or start the command in it.
    unsafe {
        libc::close(r);
        libc::setpgid(pid, if pgid == 0 { pid } else { pgid });
    }
    use std::os::fd::FromRawFd;
    // SAFETY: w is an open descriptor we own from here on.
    let tx = unsafe { std::fs::File::from_raw_fd(w) };
    Ok((pid, tx))
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // Closing the pipe tells it we are done: it ends the group (itself included).
        self.tx = None;
        self.kill_now();
        let mut status = 0;
        // SAFETY: the watchdog is our child; reaping it leaves no zombie.
        unsafe { libc::waitpid(self.pid, &mut status, 0) };
        self.cage.close();
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

/// What a forked watchdog is given: its pipe's ends, the stop grace, the group to join (0: its
/// own), and the cage's files (`cgroup.kill`, the freezer, `cgroup.procs`), kind and cookie.
struct Given<'a> {
    r: i32,
    w: i32,
    grace_ns: u64,
    pgid: i32,
    cage_fds: [i32; 3],
    v1: bool,
    needle: &'a [u8],
}

unsafe fn watchdog_main(given: Given<'_>, server: Option<&mut parent::Server>) -> ! {
    let Given {
        r,
        w,
        grace_ns,
        pgid,
        cage_fds,
        v1,
        needle,
    } = given;
    // SAFETY: called only in the forked watchdog child (see `fork_watchdog`): it owns its
    // process, the descriptors it is given are open, and every call here is async-signal-safe
    // on memory prepared before the fork.
    unsafe {
        libc::close(w);
        libc::setpgid(0, pgid);
        let group = if pgid == 0 { libc::getpid() } else { pgid };
        ignore_parents_signals();
        // Hold nothing of the parent's open (no pipe a reader waits on, no database) but the
        // pipe (3), the cage's files (4..=6) and, as the command's parent, its stdout (7) and
        // the answers (8); none of them reaches the command (close-on-exec).
        let (out_w, back_w) = server.as_ref().map_or((-1, -1), |s| (s.out_w, s.back_w));
        let keep = [r, cage_fds[0], cage_fds[1], cage_fds[2], out_w, back_w];
        let mut high = [-1i32; 6];
        for (i, fd) in keep.iter().enumerate() {
            if *fd >= 0 {
                high[i] = libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, 64);
            }
        }
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            libc::dup2(null, 0);
            libc::dup2(null, 1);
            // As the command's parent, its stderr is ours, passed on.
            if server.is_none() {
                libc::dup2(null, 2);
            }
        }
        let mut at = [-1i32; 6];
        for (i, fd) in high.iter().enumerate() {
            let to = 3 + i as i32;
            if *fd >= 0 && libc::dup3(*fd, to, libc::O_CLOEXEC) >= 0 {
                at[i] = to;
            }
        }
        libc::syscall(libc::SYS_close_range, 9u32, u32::MAX, 0u32);
        let r = 3;
        let cage = [at[1], at[2], at[3]];
        let mut server = server;
        if let Some(srv) = server.as_mut() {
            srv.out_w = at[4];
            srv.back_w = at[5];
            // Orphans of the command come to us, not to init: we end them.
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        }
        let parented = server.is_some();
        // The cage first: we are in the group, and its SIGKILL ends us too.
        let end_all = || {
            crate::contain::kill_raw(cage, v1, needle);
            if parented {
                parent::end_children();
            }
            libc::kill(-group, libc::SIGKILL);
        };
        let mut deadline = u64::MAX;
        loop {
            let now = mono_ns();
            if now >= deadline {
                libc::kill(-group, libc::SIGTERM);
                let ts = libc::timespec {
                    tv_sec: (grace_ns / 1_000_000_000) as libc::time_t,
                    tv_nsec: (grace_ns % 1_000_000_000) as libc::c_long,
                };
                libc::nanosleep(&ts, std::ptr::null_mut());
                end_all();
                libc::_exit(0);
            }
            let mut wait_ms = if deadline == u64::MAX {
                -1
            } else {
                (((deadline - now) / 1_000_000) + 1).min(i32::MAX as u64) as i32
            };
            // Its command's end is heard by looking: no signal handler in a forked child.
            if server.as_ref().is_some_and(|s| s.cmd > 0) {
                wait_ms = if wait_ms < 0 { 10 } else { wait_ms.min(10) };
            }
            let mut pfd = libc::pollfd {
                fd: r,
                events: libc::POLLIN,
                revents: 0,
            };
            let n = libc::poll(&mut pfd, 1, wait_ms);
            if let Some(srv) = server.as_mut() {
                srv.reap();
            }
            if n < 0 {
                if *libc::__errno_location() == libc::EINTR {
                    continue;
                }
                end_all();
                libc::_exit(1);
            }
            if n == 0 {
                continue;
            }
            let mut tag = [0u8; 1];
            if !parent::read_exact(r, tag.as_mut_ptr(), 1) {
                // Our parent is gone (or done): nothing of its command may outlive it.
                end_all();
                libc::_exit(0);
            }
            match tag[0] {
                b'D' => {
                    let mut buf = [0u8; 8];
                    if !parent::read_exact(r, buf.as_mut_ptr(), 8) {
                        end_all();
                        libc::_exit(0);
                    }
                    deadline = u64::from_le_bytes(buf);
                }
                b'S' => {
                    let mut len = [0u8; 4];
                    if !parent::read_exact(r, len.as_mut_ptr(), 4) {
                        end_all();
                        libc::_exit(0);
                    }
                    let len = u32::from_le_bytes(len) as usize;
                    match server.as_mut() {
                        Some(srv) => srv.start(r, len, group),
                        None => {
                            // Not its parent: nothing to start; the message is skipped.
                            let mut sink = [0u8; 512];
                            let mut left = len;
                            while left > 0 {
                                let k = left.min(sink.len());
                                if !parent::read_exact(r, sink.as_mut_ptr(), k) {
                                    break;
                                }
                                left -= k;
                            }
                        }
                    }
                }
                b'K' => {
                    crate::contain::kill_raw(cage, v1, needle);
                    if let Some(srv) = server.as_mut() {
                        parent::end_children();
                        srv.reap();
                        srv.answer(b'K', 0);
                    }
                }
                _ => {}
            }
        }
    }
}

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
    let margin = |i: Instant| i.checked_sub(DEADLINE_MARGIN).unwrap_or(i);
    // The deadline as granted: a first read that fails leaves it, never none.
    let mut deadline: Option<(String, Instant)> = watch
        .as_ref()
        .and_then(|w| w.granted.clone())
        .map(|(u, ends)| (u, margin(ends)));
    if let Some((until, d)) = &deadline {
        if Instant::now() >= *d {
            return Err(NotStarted::LeaseGone(Stopped::LeaseExpired(until.clone())));
        }
    }
    let done = Arc::new(AtomicBool::new(false));
    let (heard_tx, heard_rx) = mpsc::channel::<Heard>();
    if let Some(w) = watch.clone() {
        let recorded = w.granted.as_ref().map(|g| g.0.clone());
        let done = done.clone();
        std::thread::spawn(move || read_lease(w, recorded, heard_tx, done));
        // With nothing granted, the permission to send is the lease as first read.
        if deadline.is_none() {
            match heard_rx.recv_timeout(LEASE_POLL * 10) {
                Ok(Heard::Until(u, ends)) => deadline = Some((u, margin(ends))),
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
    in_group(cmd, watchdog.as_ref().map(|w| w.pgid))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(wd) = watchdog.as_ref() {
        wd.cage().hold(cmd);
    }
    // Where no cgroup could be made the watchdog starts the command, as its parent and
    // subreaper; otherwise we do, in the watchdog's group and the cage.
    let mut child: Option<std::process::Child> = None;
    let (pgid, stdout): (i32, Option<Box<dyn Read + Send>>) = match watchdog.as_mut() {
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
    let mut looked_at_watchdog = Instant::now();
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
    let mut stopped: Option<Stopped> = None;
    let mut term_at: Option<Instant> = None;
    let mut forwarded = None;
    let status = loop {
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
            signal_group(pgid, sig as i32);
            forwarded = Some(sig as i32);
        }
        while let Ok(h) = heard_rx.try_recv() {
            let stop = match h {
                Heard::Until(u, ends) => {
                    let d = margin(ends);
                    if let Some(wd) = watchdog.as_mut() {
                        if deadline.as_ref().is_none_or(|(_, old)| *old != d) {
                            wd.arm(Some(d));
                        }
                    }
                    deadline = Some((u, d));
                    None
                }
                Heard::Superseded(t) => Some(Stopped::Superseded(t)),
                Heard::Released => Some(Stopped::LeaseExpired(crate::lease::RELEASED.to_string())),
            };
            if stopped.is_none() {
                if let Some(s) = stop {
                    signal_group(pgid, libc::SIGTERM);
                    term_at = Some(Instant::now());
                    stopped = Some(s);
                }
            }
        }
        if stopped.is_none() {
            if let Some((until, d)) = &deadline {
                if Instant::now() >= *d {
                    signal_group(pgid, libc::SIGTERM);
                    term_at = Some(Instant::now());
                    stopped = Some(Stopped::LeaseExpired(until.clone()));
                }
            }
        }
        if term_at.is_some_and(|t| t.elapsed() >= STOP_GRACE) {
            match watchdog.as_ref() {
                Some(wd) => wd.kill_now(),
                None => signal_group(pgid, libc::SIGKILL),
            }
        }
        if looked_at_watchdog.elapsed() >= WATCHDOG_LOOK {
            looked_at_watchdog = Instant::now();
            if let Some(wd) = watchdog.as_mut() {
                look_at(wd);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    done.store(true, Ordering::SeqCst);
    // The watchdog may have stopped it at the deadline a moment before we looked.
    if stopped.is_none() {
        if let Some((until, d)) = &deadline {
            if Instant::now() >= *d {
                stopped = Some(Stopped::LeaseExpired(until.clone()));
            }
        }
    }
    // Nothing the command started may go on sending after we record its outcome: its group,
    // its cage (what left the group), and what was re-parented to us.
    signal_group(pgid, libc::SIGKILL);
    if let Some(wd) = watchdog.as_mut() {
        wd.end_descendants();
    }
    if let Some(wd) = watchdog.as_ref() {
        if !wd.end_all() {
            eprintln!(
                "exactly: something the command started could not be ended within {}s \
                 (another user's process?): a retry will judge this send by its deadline",
                crate::contain::END_WAIT.as_secs()
            );
        }
    }
    end_orphans();
    let _ = done_rx.recv_timeout(PIPE_WAIT);
    let output = out.lock().map(|o| o.clone()).unwrap_or_default();
    Ok(Ended {
        status,
        output,
        stopped,
        forwarded,
    })
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
