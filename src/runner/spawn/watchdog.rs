//! One watchdog process for all of a process's runs: forked once, before the first run (while
//! the process is small: forking a scheduler with hundreds of threads for each run costs more
//! than the runs), it holds each running command's process group and its lease deadline, and
//! stops a group at its deadline — SIGTERM, then SIGKILL after [`GRACE`] — even while the
//! scheduler is frozen (SIGSTOP), hung or starved. When the scheduler dies (its end of the pipe
//! closes) it SIGKILLs every group it holds: nothing of a run outlives its scheduler.
//!
//! Runs tell it `arm(group, deadline)` (again as renewals move the deadline) and `disarm(group)`
//! once the command has ended and been reaped; it tells back which groups it stopped.
//!
//! It is a process a signal can kill or freeze: the groups armed are also kept here, so the
//! scheduler's supervisor (`scheduler/supervise.rs`) can replace a dead or stopped watchdog with a new
//! one holding them all ([`restart`]), and keep their deadlines itself meanwhile
//! ([`enforce_deadlines`]).
use crate::wrapped::{mono_ns, pipe};
use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

/// Between SIGTERM and SIGKILL of a group stopped at its deadline.
pub(crate) const GRACE: Duration = crate::policy::STOP_GRACE;
/// Most groups held at once; beyond it, a run has only its own thread to stop its command.
const SLOTS: usize = 4096;

/// One watchdog process, as the scheduler talks to it. Replaced when it dies (see
/// [`restart`]): the scheduler's supervisor (`scheduler/supervise.rs`) restarts it.
struct Shared {
    pid: i32,
    tx: Mutex<std::fs::File>,
    /// Set by the reader thread when the back pipe closes: the process is gone.
    dead: Arc<AtomicBool>,
}

/// The watchdog now, once started (None: none could be started).
fn current() -> &'static RwLock<Option<Arc<Shared>>> {
    static CURRENT: RwLock<Option<Arc<Shared>>> = RwLock::new(None);
    static FIRST: OnceLock<()> = OnceLock::new();
    FIRST.get_or_init(|| {
        let started = start().ok().map(Arc::new);
        if let Ok(mut c) = CURRENT.write() {
            *c = started;
        }
    });
    &CURRENT
}

fn shared() -> Option<Arc<Shared>> {
    current().read().ok()?.clone()
}

/// Groups armed, with their deadline on the monotonic clock: what a restarted watchdog is
/// given again, what the scheduler enforces itself while its watchdog is gone or stopped, and
/// what shutdown kills at the end of its grace.
fn armed() -> &'static Mutex<HashMap<i32, u64>> {
    static ARMED: OnceLock<Mutex<HashMap<i32, u64>>> = OnceLock::new();
    ARMED.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The cage of each armed group (see `crate::contain`): what left the group is ended with it.
fn caged() -> &'static Mutex<HashMap<i32, crate::contain::Cage>> {
    static CAGED: OnceLock<Mutex<HashMap<i32, crate::contain::Cage>>> = OnceLock::new();
    CAGED.get_or_init(|| Mutex::new(HashMap::new()))
}

/// `group`'s command runs in `cage`: the watchdog ends the cage with the group (told the cage's
/// id in a message of the arm's size, its group negated).
pub(crate) fn cage(group: i32, cage: &crate::contain::Cage) {
    if group <= 1 {
        return;
    }
    if let Ok(mut c) = caged().lock() {
        c.insert(group, cage.clone());
    }
    if let Some(id) = cage.id() {
        send(-group, id);
    }
}

/// The run has ended its cage itself: forget it.
pub(crate) fn uncage(group: i32) {
    if let Ok(mut c) = caged().lock() {
        c.remove(&group);
    }
}

/// SIGKILLs `group` and what is in its cage, from this process.
fn kill_group_and_cage(group: i32) {
    if group > 1 {
        // SAFETY: kill has no memory-safety preconditions; the group is a run's command's.
        unsafe { libc::kill(-group, libc::SIGKILL) };
    }
    let cage = caged().lock().ok().and_then(|c| c.get(&group).cloned());
    if let Some(c) = cage {
        c.kill_once();
    }
}

/// Groups the watchdog (or the scheduler in its stead) stopped at their deadline.
fn fired_set() -> &'static Mutex<HashSet<i32>> {
    static FIRED: OnceLock<Mutex<HashSet<i32>>> = OnceLock::new();
    FIRED.get_or_init(|| Mutex::new(HashSet::new()))
}

/// Starts the watchdog if it is not running yet (a scheduler calls this early, while small).
pub(crate) fn ready() -> bool {
    shared().is_some()
}

/// Stop `group` at `deadline` (its whole process group).
pub(crate) fn arm(group: i32, deadline: Instant) -> bool {
    let ns = mono_deadline(deadline);
    if let Ok(mut a) = armed().lock() {
        a.insert(group, ns);
    }
    send(group, ns)
}

/// The descriptor runs write `arm` and `disarm` messages to (the spawner is given a copy, so a
/// command is held from the instant it starts, see `spawner/`). None without a watchdog.
/// A restarted watchdog's pipe is handed to the spawner (`spawner::hand_watchdog`); each run
/// also arms its group itself once the spawner said it started (`Heartbeat::guard`).
pub(crate) fn pipe_fd() -> Option<i32> {
    use std::os::fd::AsRawFd;
    let s = shared()?;
    let fd = s.tx.lock().ok().map(|f| f.as_raw_fd());
    fd
}

/// The message that arms `group` until `ns` on the monotonic clock (0: disarm).
pub(crate) fn message(group: i32, ns: u64) -> [u8; 12] {
    let mut msg = [0u8; 12];
    msg[..4].copy_from_slice(&group.to_le_bytes());
    msg[4..].copy_from_slice(&ns.to_le_bytes());
    msg
}

/// `deadline` on the monotonic clock as the watchdog counts it.
pub(crate) fn mono_deadline(deadline: Instant) -> u64 {
    mono_ns().saturating_add(
        deadline
            .saturating_duration_since(Instant::now())
            .as_nanos() as u64,
    )
}

/// The group's command ended (and was reaped): forget it.
pub(crate) fn disarm(group: i32) {
    if let Ok(mut a) = armed().lock() {
        a.remove(&group);
    }
    if let Ok(mut e) = enforced().lock() {
        e.remove(&group);
    }
    send(group, 0);
}

/// Whether the watchdog stopped `group` at its deadline (asked once the command has ended).
pub(crate) fn fired(group: i32) -> bool {
    if shared().is_none() {
        return false;
    }
    // Its word travels on a pipe: give it a moment to arrive.
    let until = Instant::now() + Duration::from_millis(50);
    loop {
        if let Ok(mut f) = fired_set().lock() {
            if f.remove(&group) {
                return true;
            }
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn send(group: i32, ns: u64) -> bool {
    let Some(s) = shared() else { return false };
    let msg = message(group, ns);
    let sent = s.tx.lock().is_ok_and(|mut tx| tx.write_all(&msg).is_ok());
    sent
}

/// How the watchdog is, as the scheduler's supervisor sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Serving (or never started: nothing to watch).
    Fine,
    /// Its process is gone.
    Dead(i32),
    /// Its process is stopped (SIGSTOP, a debugger): it keeps no deadline.
    Stopped(i32),
}

/// How the watchdog is now.
pub(crate) fn state() -> State {
    let Some(s) = shared() else {
        return State::Fine;
    };
    if s.dead.load(Ordering::SeqCst) {
        return State::Dead(s.pid);
    }
    match crate::sender::stat(s.pid).map(|st| st.state) {
        None | Some('Z') | Some('X') => State::Dead(s.pid),
        Some('T') | Some('t') => State::Stopped(s.pid),
        Some(_) => State::Fine,
    }
}

/// Replaces the watchdog (dead, or stopped and so no longer to be trusted: it is SIGKILLed)
/// with a new one, given every group still armed: (its pid, how many groups it holds).
pub(crate) fn restart() -> std::io::Result<(i32, usize)> {
    let old = shared();
    if let Some(old) = &old {
        let died = !matches!(crate::sender::stat(old.pid), Some(st) if st.state != 'Z');
        // Said once, by whoever sees it first (its reader, or here); the end of a stopped one
        // we kill is ours, not news.
        if !old.dead.swap(true, Ordering::SeqCst) && died {
            said_gone(old.pid);
        }
        // A stopped one must not wake up later beside the new one.
        // SAFETY: kill on the pid of our own watchdog child.
        unsafe { libc::kill(old.pid, libc::SIGKILL) };
    }
    let new = Arc::new(start()?);
    let pid = new.pid;
    if let Ok(mut c) = current().write() {
        *c = Some(new);
    }
    if let Some(old) = old {
        // Reap it (our child, SIGKILLed: it ends at once); ECHILD if already reaped.
        // SAFETY: waitpid on our own child's pid; a null status pointer is allowed.
        unsafe { libc::waitpid(old.pid, std::ptr::null_mut(), 0) };
    }
    let groups: Vec<(i32, u64)> = armed()
        .lock()
        .map(|a| a.iter().map(|(g, d)| (*g, *d)).collect())
        .unwrap_or_default();
    for (g, ns) in &groups {
        send(*g, *ns);
    }
    let held: Vec<(i32, u64)> = caged()
        .lock()
        .map(|c| c.iter().filter_map(|(g, c)| Some((*g, c.id()?))).collect())
        .unwrap_or_default();
    for (g, id) in held {
        send(-g, id);
    }
    Ok((pid, groups.len()))
}

/// Groups [`enforce_deadlines`] already SIGKILLed (until disarmed): each is killed and said
/// once, not every look.
fn enforced() -> &'static Mutex<HashSet<i32>> {
    static ENFORCED: OnceLock<Mutex<HashSet<i32>>> = OnceLock::new();
    ENFORCED.get_or_init(|| Mutex::new(HashSet::new()))
}

/// Stops every armed group past its deadline with SIGKILL, from this process: what the
/// scheduler does while its watchdog cannot. Returns how many it stopped.
pub(crate) fn enforce_deadlines() -> usize {
    let now = mono_ns();
    let Ok(mut done) = enforced().lock() else {
        return 0;
    };
    let due: Vec<i32> = armed()
        .lock()
        .map(|a| {
            a.iter()
                .filter(|(g, d)| now >= **d && !done.contains(*g))
                .map(|(g, _)| *g)
                .collect()
        })
        .unwrap_or_default();
    done.extend(due.iter().copied());
    for g in &due {
        kill_group_and_cage(*g);
        if let Ok(mut f) = fired_set().lock() {
            f.insert(*g);
        }
    }
    due.len()
}

/// SIGKILLs every armed group (at the end of shutdown's grace): how many.
pub(crate) fn kill_all() -> usize {
    let groups: Vec<i32> = armed()
        .lock()
        .map(|a| a.keys().copied().collect())
        .unwrap_or_default();
    for g in groups.iter().filter(|g| **g > 1) {
        kill_group_and_cage(*g);
    }
    groups.len()
}

fn said_gone(pid: i32) {
    tracing::error!(
        "the watchdog process {pid} is gone: run deadlines are kept by the scheduler until it \
         is restarted"
    );
}

fn start() -> std::io::Result<Shared> {
    let (to_r, to_w) = pipe()?;
    let (back_r, back_w) = pipe()?;
    let grace = GRACE.as_nanos() as u64;
    // Where run cages are made, so the forked watchdog can find a cage by its id alone.
    let (sub, v1): (Vec<u8>, bool) = crate::contain::subtree().map_or((Vec::new(), false), |s| {
        (
            s.dir.as_os_str().as_encoded_bytes().to_vec(),
            s.kind == crate::contain::Containment::CgroupV1,
        )
    });
    // SAFETY: the child runs only async-signal-safe libc calls on its stack (no allocation, no
    // locks) and never returns: `main` ends in `_exit`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: in the forked child; see above.
        unsafe { main(to_r, back_w, grace, &sub, v1) }
    }
    // SAFETY: the child has its copies; these ends are its.
    unsafe {
        libc::close(to_r);
        libc::close(back_w);
    }
    // SAFETY: to_w and back_r are open descriptors we own from here on.
    let (tx, mut rx) = unsafe {
        (
            std::fs::File::from_raw_fd(to_w),
            std::fs::File::from_raw_fd(back_r),
        )
    };
    let dead = Arc::new(AtomicBool::new(false));
    let gone = dead.clone();
    // The groups it stopped, as it says them (read on a thread of our own); its end closes
    // the pipe, and is said at once.
    std::thread::Builder::new()
        .name("watchdog-reader".into())
        .spawn(move || {
            let mut buf = [0u8; 4];
            while rx.read_exact(&mut buf).is_ok() {
                if let Ok(mut f) = fired_set().lock() {
                    f.insert(i32::from_le_bytes(buf));
                }
            }
            if !gone.swap(true, Ordering::SeqCst) {
                said_gone(pid);
            }
        })?;
    Ok(Shared {
        pid,
        tx: Mutex::new(tx),
        dead,
    })
}

/// One held group: its id, its deadline, when it was sent SIGTERM (0: not yet), and its cage's
/// id (0: none).
#[derive(Clone, Copy)]
struct Slot {
    group: i32,
    deadline: u64,
    termed: u64,
    cage: u64,
}

/// The watchdog's life, in the forked child: async-signal-safe calls only, state on the stack.
unsafe fn main(r: i32, w: i32, grace: u64, sub: &[u8], v1: bool) -> ! {
    // SAFETY: called only in the forked watchdog child: it owns its process, `r` and
    // `w` are its pipe ends, and every call here is async-signal-safe on stack data.
    unsafe {
        detach(r, w);
        let mut slots = [Slot {
            group: 0,
            deadline: 0,
            termed: 0,
            cage: 0,
        }; SLOTS];
        // Slots in use are below `hi`: the scan stays as short as the runs.
        let mut hi = 0usize;
        let mut buf = [0u8; 12 * 64];
        let mut have = 0usize;
        loop {
            let wait = stop_due(&mut slots[..hi], grace, w, sub, v1);
            let ms = if wait == u64::MAX {
                -1
            } else {
                ((wait / 1_000_000) + 1).min(i32::MAX as u64) as i32
            };
            let mut pfd = libc::pollfd {
                fd: r,
                events: libc::POLLIN,
                revents: 0,
            };
            if libc::poll(&mut pfd, 1, ms) <= 0 {
                continue;
            }
            let got = libc::read(
                r,
                buf.as_mut_ptr().add(have) as *mut libc::c_void,
                buf.len() - have,
            );
            if got == 0 || (got < 0 && *libc::__errno_location() != libc::EINTR) {
                // Our scheduler is gone: nothing of its runs may outlive it.
                for s in slots[..hi].iter().filter(|s| s.group > 0) {
                    end(s, sub, v1);
                }
                libc::_exit(0);
            }
            if got < 0 {
                continue;
            }
            have += got as usize;
            let whole = have / 12 * 12;
            let mut at = 0;
            while at < whole {
                held(&mut slots, &mut hi, &buf[at..at + 12]);
                at += 12;
            }
            buf.copy_within(whole..have, 0);
            have -= whole;
        }
    }
}

/// The watchdog's process on its own: its own group and name, deaf to the scheduler's
/// signals, its standard streams on /dev/null and no descriptor but its pipe ends `r`, `w`.
unsafe fn detach(r: i32, w: i32) {
    // SAFETY: in the forked watchdog child (see `main`): async-signal-safe calls only.
    unsafe {
        libc::setpgid(0, 0);
        // Found by its name (an operator's ps, the tests), as the spawner is.
        libc::prctl(libc::PR_SET_NAME, c"exactly-wdog".as_ptr());
        // The scheduler's signals are for the scheduler; it tells us what to do by the pipe.
        crate::wrapped::ignore_parents_signals();
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            libc::dup2(null, 0);
            libc::dup2(null, 1);
            libc::dup2(null, 2);
        }
        // Keep only our two pipe ends: no database, no other run's pipes.
        for fd in 3..1024 {
            if fd != r && fd != w {
                libc::close(fd);
            }
        }
        libc::syscall(libc::SYS_close_range, 1024u32, u32::MAX, 0u32);
    }
}

/// A group's whole end: what left it (`setsid`, `timeout`) is in its cage.
unsafe fn end(s: &Slot, sub: &[u8], v1: bool) {
    // SAFETY: in the forked watchdog child (see `main`): async-signal-safe calls only.
    unsafe {
        if s.cage != 0 {
            crate::contain::kill_cage_raw(sub, v1, b"run", s.cage);
        }
        libc::kill(-s.group, libc::SIGKILL);
    }
}

/// SIGTERMs each group past its deadline (and tells the scheduler, on `w`), ends each past
/// its grace after that; returns how long until the next of those is due (`u64::MAX`: none).
unsafe fn stop_due(slots: &mut [Slot], grace: u64, w: i32, sub: &[u8], v1: bool) -> u64 {
    // SAFETY: in the forked watchdog child (see `main`): async-signal-safe calls only.
    unsafe {
        let now = mono_ns();
        let mut wait = u64::MAX;
        for s in slots.iter_mut().filter(|s| s.group > 0) {
            if s.termed == 0 && now >= s.deadline {
                libc::kill(-s.group, libc::SIGTERM);
                s.termed = now;
                let g = s.group.to_le_bytes();
                libc::write(w, g.as_ptr() as *const libc::c_void, 4);
            }
            if s.termed == u64::MAX {
                continue;
            }
            if s.termed > 0 {
                if now >= s.termed.saturating_add(grace) {
                    end(s, sub, v1);
                    // Held until disarmed: its run reaps the command and says so.
                    s.termed = u64::MAX;
                } else {
                    wait = wait.min(s.termed + grace - now);
                }
            } else {
                wait = wait.min(s.deadline - now);
            }
        }
        wait
    }
}

/// One 12-byte message from the scheduler: a group and its deadline (0: disarmed), or, with
/// the group negated, its cage's id.
fn held(slots: &mut [Slot; SLOTS], hi: &mut usize, m: &[u8]) {
    let group = i32::from_le_bytes([m[0], m[1], m[2], m[3]]);
    let deadline = u64::from_le_bytes([m[4], m[5], m[6], m[7], m[8], m[9], m[10], m[11]]);
    if group < -1 {
        // The cage of group -group (its id where the deadline would be).
        if let Some(i) = slots[..*hi].iter().position(|s| s.group == -group) {
            slots[i].cage = deadline;
        }
        return;
    }
    if group <= 1 {
        return;
    }
    let found = slots[..*hi].iter().position(|s| s.group == group);
    if deadline == 0 {
        if let Some(i) = found {
            slots[i].group = 0;
            while *hi > 0 && slots[*hi - 1].group == 0 {
                *hi -= 1;
            }
        }
        return;
    }
    let free = found.or_else(|| slots[..*hi].iter().position(|s| s.group == 0));
    let free = free.or_else(|| (*hi < SLOTS).then_some(*hi));
    if let Some(i) = free {
        // A group already being stopped stays stopped.
        if slots[i].group != group || slots[i].termed == 0 {
            let cage = if slots[i].group == group {
                slots[i].cage
            } else {
                0
            };
            slots[i] = Slot {
                group,
                deadline,
                termed: 0,
                cage,
            };
        }
        *hi = (*hi).max(i + 1);
    }
}
