//! The sender's watchdog: a small process forked before the row is submitted that leads the
//! command's process group, holds its cage, and stops both at the deadline even while the sender
//! is paused; without a cgroup it is also the command's parent (see `parent.rs`).
use super::{ignore_parents_signals, mono_ns, parent, pipe, signal_group};
use exactly_words::contain::{Cage, Killer};
use exactly_words::policy::STOP_GRACE;
use std::io::{Read, Write};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

/// A small process forked before the row is submitted: it leads the process group the command
/// will run in (so the row can name the group before anything is sent), holds the command's
/// [`Cage`] (a cgroup of its own, or a cookie), and stops both at the deadline it was last given
/// — even while we are paused (SIGSTOP) or hung — and at once when we die, so nothing the
/// command started (`timeout` and `setsid` leave the group, not the cage) can send after a retry
/// has judged us gone. We watch it in turn: a dead one is restarted, a stopped one said.
pub struct Watchdog {
    /// The command's process group: the first watchdog's pid.
    pub(super) pgid: i32,
    /// The first watchdog's start time (how the row names the group).
    start: u64,
    /// The watchdog process now (a restarted one joins the same group).
    pub(super) pid: i32,
    tx: Option<std::fs::File>,
    cage: Cage,
    killer: Killer,
    /// The deadline last armed (monotonic ns), given again to a restarted watchdog.
    armed: u64,
    /// Whether it was last seen stopped (said once per stop).
    pub(super) stopped: bool,
    /// Where no cgroup could be made, the watchdog starts the command itself (see
    /// [`parent`]): the command's stdout and the watchdog's answers.
    pub(super) held: Option<Held>,
}

/// The watchdog as the command's parent: what `exactly effect` keeps of it.
pub(super) struct Held {
    /// The command's stdout (read end), taken when it starts.
    pub(super) out: Option<std::fs::File>,
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
        let (pid, tx, held) = if cage.containment() == exactly_words::contain::Containment::Cookie {
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
        let start = exactly_words::sender::stat(pid)
            .map(|s| s.start)
            .unwrap_or(0);
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
    pub(super) fn start_command(&mut self, cmd: &Command) -> std::io::Result<i32> {
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
                    let start = exactly_words::sender::stat(pid).map_or(0, |s| s.start);
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
    pub(super) fn try_status(&mut self) -> std::io::Result<Option<ExitStatus>> {
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
            exactly_words::sender::stat(pid)
                .filter(|s| s.zombie && (start == 0 || s.start == start))
                .map(|s| ExitStatus::from_raw(s.exit_code))
        }))
    }

    /// Has the watchdog end every descendant of the command (re-parented to it) now, and waits
    /// up to [`crate::contain::END_WAIT`] for it to say so.
    pub(super) fn end_descendants(&mut self) {
        if self.held.is_none() {
            return;
        }
        if let Some(tx) = self.tx.as_mut() {
            if tx.write_all(b"K").is_err() {
                return;
            }
        }
        let until = Instant::now() + exactly_words::contain::END_WAIT;
        while Instant::now() < until {
            match self.heard() {
                Ok(Some((b'K', _))) | Err(_) => return,
                _ => std::thread::sleep(Duration::from_millis(2)),
            }
        }
    }

    /// The group the command runs in.
    pub fn group(&self) -> exactly_words::sender::Group {
        exactly_words::sender::Group {
            pgid: self.pgid,
            leader_start: self.start,
        }
    }

    /// The cage the command runs in.
    pub fn cage(&self) -> &Cage {
        &self.cage
    }

    /// Stop the group at `deadline` (None: no deadline).
    pub(super) fn arm(&mut self, deadline: Option<Instant>) {
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
        match exactly_words::sender::stat(self.pid) {
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
    pub(super) fn end_all(&self) -> bool {
        signal_group(self.pgid, libc::SIGKILL);
        self.cage.end()
    }

    /// SIGKILLs the group and every process in the cage once (a stop's last step).
    pub(super) fn kill_now(&self) {
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
        let mut server = server;
        let (group, at) = own_fds(r, w, pgid, &server, cage_fds);
        let r = 3;
        let cage = [at[1], at[2], at[3]];
        if let Some(srv) = server.as_mut() {
            srv.out_w = at[4];
            srv.back_w = at[5];
            // Orphans of the command come to us, not to init: we end them.
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        }
        let keeper = Keeper {
            r,
            group,
            cage,
            v1,
            needle,
            parented: server.is_some(),
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
                keeper.end_all();
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
                keeper.end_all();
                libc::_exit(1);
            }
            if n == 0 {
                continue;
            }
            let mut tag = [0u8; 1];
            if !parent::read_exact(r, tag.as_mut_ptr(), 1) {
                // Our parent is gone (or done): nothing of its command may outlive it.
                keeper.end_all();
                libc::_exit(0);
            }
            keeper.order(tag[0], &mut deadline, &mut server);
        }
    }
}

/// Joins the group (0: its own, whose id is returned), ignores the parent's signals, and holds
/// nothing of the parent's open (no pipe a reader waits on, no database) but the pipe (3), the
/// cage's files (4..=6) and, as the command's parent, its stdout (7) and the answers (8); none
/// of them reaches the command (close-on-exec). Returns the group and where each landed (-1:
/// not open).
unsafe fn own_fds(
    r: i32,
    w: i32,
    pgid: i32,
    server: &Option<&mut parent::Server>,
    cage_fds: [i32; 3],
) -> (i32, [i32; 6]) {
    // SAFETY: in the forked watchdog child (see `watchdog_main`): async-signal-safe calls on
    // descriptors it owns.
    unsafe {
        libc::close(w);
        libc::setpgid(0, pgid);
        let group = if pgid == 0 { libc::getpid() } else { pgid };
        ignore_parents_signals();
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
        (group, at)
    }
}

/// What the forked watchdog keeps: its pipe, the group, the cage (its files, kind and cookie),
/// and whether it is the command's parent.
struct Keeper<'a> {
    r: i32,
    group: i32,
    cage: [i32; 3],
    v1: bool,
    needle: &'a [u8],
    parented: bool,
}

impl Keeper<'_> {
    /// Ends everything: the cage first (we are in the group, and its SIGKILL ends us too).
    unsafe fn end_all(&self) {
        // SAFETY: in the forked watchdog child: async-signal-safe calls only.
        unsafe {
            exactly_words::contain::kill_raw(self.cage, self.v1, self.needle);
            if self.parented {
                parent::end_children();
            }
            libc::kill(-self.group, libc::SIGKILL);
        }
    }

    /// One order from the parent, its tag read: `D` a deadline, `S` a command to start, `K`
    /// kill the cage now. A pipe that ends mid-order ends everything.
    unsafe fn order(&self, tag: u8, deadline: &mut u64, server: &mut Option<&mut parent::Server>) {
        let r = self.r;
        // SAFETY: in the forked watchdog child: async-signal-safe calls on stack buffers.
        unsafe {
            match tag {
                b'D' => {
                    let mut buf = [0u8; 8];
                    if !parent::read_exact(r, buf.as_mut_ptr(), 8) {
                        self.end_all();
                        libc::_exit(0);
                    }
                    *deadline = u64::from_le_bytes(buf);
                }
                b'S' => {
                    let mut len = [0u8; 4];
                    if !parent::read_exact(r, len.as_mut_ptr(), 4) {
                        self.end_all();
                        libc::_exit(0);
                    }
                    let len = u32::from_le_bytes(len) as usize;
                    match server.as_mut() {
                        Some(srv) => srv.start(r, len, self.group),
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
                    exactly_words::contain::kill_raw(self.cage, self.v1, self.needle);
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
